//! `germline start|status|call|stop` driven through the library's command handlers.

mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use germline_sandbox::cli::{self, CallArgs, Command, IdArgs, ReleaseArgs, StartArgs, StatusArgs};

#[test]
fn start_status_call_stop() {
    if !common::can_run() {
        return;
    }
    let id = common::id("cli");
    let sock = std::path::Path::new(cli::RUN_DIR).join(format!("{id}.sock"));
    let start = StartArgs {
        release: ReleaseArgs {
            release: "mcp-server-time".into(),
            warm: false,
        },
        id: Some(id.clone()),
        pool: 1,
        foreground: true,
        json: false,
    };
    // The supervisor runs (and stops its germline) in its own thread, as `start --foreground`.
    let daemon = std::thread::spawn(move || cli::run(Command::Start(start)));
    let t = Instant::now();
    while !sock.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the germline did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        cli::run(Command::Status(StatusArgs {
            id: Some(id.clone()),
            json: false
        })),
        ExitCode::SUCCESS
    );
    let call = CallArgs {
        id: id.clone(),
        tool: "get_current_time".into(),
        arguments: r#"{"timezone":"UTC"}"#.into(),
        json: false,
    };
    assert_eq!(cli::run(Command::Call(call)), ExitCode::SUCCESS);
    let bad = CallArgs {
        id: id.clone(),
        tool: "no_such_tool".into(),
        arguments: "{}".into(),
        json: false,
    };
    assert_ne!(cli::run(Command::Call(bad)), ExitCode::SUCCESS);
    assert_eq!(
        cli::run(Command::Stop(IdArgs {
            id: id.clone(),
            json: false
        })),
        ExitCode::SUCCESS
    );
    assert_eq!(daemon.join().expect("daemon thread"), ExitCode::SUCCESS);
    assert!(!sock.exists());
    assert_ne!(
        cli::run(Command::Status(StatusArgs {
            id: Some(id),
            json: false
        })),
        ExitCode::SUCCESS,
        "a stopped germline has no status"
    );
}
