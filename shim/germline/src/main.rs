//! The `germline` command: parses arguments and calls the component crates.

mod broker_cmd;
mod client_cmd;
mod gc_cmd;
mod output;
mod plan_cmd;
mod progress;
mod release_cmd;
mod research_cmd;
mod witness_cmd;

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "germline",
    version,
    about = "Run signed MCP tool servers under germline execution"
)]
struct Cli {
    /// No progress display on the terminal (it is never drawn when stderr is not one).
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

/// User commands first, in the order a user meets them; the research and evaluation commands
/// (benchmarks, the security matrix, witness records) are hidden from the list and shown apart
/// after it ([`cli`]); each still has its own `--help`.
#[derive(Debug, Subcommand)]
enum Command {
    /// Serve a signed release to an MCP client over stdio, under germline execution.
    Run(germline_mcp::cli::RunArgs),
    /// The system service that runs `germline run` sessions for users who are not root.
    Daemon(germline_mcp::daemon::DaemonArgs),
    /// Serve signed releases to MCP clients over Streamable HTTP (bearer token, localhost only).
    Serve(Box<germline_mcp::serve::ServeArgs>),
    /// Add `germline run` for a release to Claude Desktop's, VS Code's or Cursor's MCP
    /// configuration, or list the germline servers they have.
    Client(client_cmd::ClientArgs),
    /// Pack, sign, publish, verify and inspect signed releases.
    Release {
        #[command(subcommand)]
        cmd: release_cmd::ReleaseCmd,
    },
    /// Write a cosign-compatible key pair (cosign.key, cosign.pub).
    Keygen(release_cmd::KeygenArgs),
    /// Print the groups Plan forms for a call, in the order their copies run.
    Plan(plan_cmd::PlanArgs),
    /// Check a deployer policy file and print what it defines.
    Policy(plan_cmd::PolicyArgs),
    #[command(flatten)]
    Sandbox(germline_sandbox::cli::Command),
    /// Remove what `run` and `serve` processes that died without stopping left behind
    /// (their germlines' cgroups and processes, their /run/germline directories).
    Gc(gc_cmd::GcArgs),
    /// The broker sidecar, and its benchmark.
    Broker(broker_cmd::BrokerArgs),
    /// Witness records of the evidence layer: verify one offline, list them with dampening.
    #[command(hide = true)]
    Witness(witness_cmd::WitnessArgs),
    /// The paper's cost figures (Table VII, Fig. 4) on this machine: bench.json, bench.md, plots.
    #[command(hide = true)]
    Bench(research_cmd::BenchJson),
    /// Per-call latency through `germline run` for one tool under every runtime.
    #[command(hide = true)]
    RunBench(research_cmd::RunBenchJson),
    /// Evaluations: the security matrix of signed Trojans against every runtime.
    #[command(hide = true)]
    Eval(research_cmd::EvalJson),
}

/// The command line: the hidden (research and evaluation) commands listed after the user
/// commands under a heading of their own, from their own descriptions.
fn cli() -> clap::Command {
    let cmd = Cli::command();
    let mut research =
        String::from("Research and evaluation commands (each has its own --help):\n");
    for s in cmd.get_subcommands().filter(|s| s.is_hide_set()) {
        let about = s.get_about().map(ToString::to_string).unwrap_or_default();
        research.push_str(&format!("  {:<14} {about}\n", s.get_name()));
    }
    cmd.after_help(research)
}

/// Errors of bad input exit 2 with the message on stderr.
fn report(result: Result<(), Box<dyn std::error::Error>>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("germline: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// As [`report`], but under `--json` the error is one JSON object on stderr naming the
/// command and, when the error type says, the file, line, column or field (output.rs).
fn report_as(
    json: bool,
    command: &str,
    result: Result<(), Box<dyn std::error::Error>>,
) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if json => {
            let place = if let Some(p) = e.downcast_ref::<germline_policy::policy::PolicyError>() {
                output::policy_place(p)
            } else if let Some(r) = e.downcast_ref::<germline_release::error::Error>() {
                output::release_place(r)
            } else {
                serde_json::Map::new()
            };
            output::print_error(command, &e.to_string(), place);
            ExitCode::from(2)
        }
        Err(e) => report(Err(e)),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::from_arg_matches(&cli().get_matches()) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Plan(args) => report_as(args.json(), "plan", plan_cmd::run_plan(&args)),
        Command::Policy(args) => {
            report_as(args.json(), "policy check", plan_cmd::run_policy(&args))
        }
        Command::Broker(args) => report_as(args.json(), "broker", broker_cmd::run(&args)),
        Command::Eval(args) => report_as(args.json, "eval", research_cmd::eval(&args)),
        Command::Witness(args) => match witness_cmd::run(&args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => report_as(args.json(), "witness", Err(e)),
        },
        // As a user (not root): the session is the daemon's, and its exit status is ours.
        Command::Run(args) if germline_mcp::daemon::wanted(&args) => {
            match germline_mcp::daemon::client(&args) {
                Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
                Err(e) => {
                    eprintln!("germline: error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Run(args) => report(germline_mcp::cli::run(&args).map_err(Into::into)),
        Command::Daemon(args) => report(germline_mcp::daemon::run(&args).map_err(Into::into)),
        Command::RunBench(args) => {
            report_as(args.json, "run-bench", research_cmd::run_bench(&args))
        }
        Command::Bench(args) => {
            report_as(args.json, "bench", research_cmd::bench(&args, cli.quiet))
        }
        Command::Serve(args) => report(germline_mcp::serve::run(&args).map_err(Into::into)),
        Command::Client(args) => report_as(
            args.json(),
            args.name(),
            client_cmd::run(&args).map_err(Into::into),
        ),
        // As a user: their own sessions, from the daemon.
        Command::Sandbox(germline_sandbox::cli::Command::Status(a))
            if a.id.is_none() && germline_mcp::daemon::status_wanted() =>
        {
            report(germline_mcp::daemon::status_client(a.json).map_err(Into::into))
        }
        Command::Sandbox(germline_sandbox::cli::Command::Status(a)) if a.id.is_none() => {
            report(germline_engine::status::run(a.json).map_err(Into::into))
        }
        Command::Gc(args) => report_as(args.json, "gc", gc_cmd::run(&args)),
        Command::Sandbox(c) => germline_sandbox::cli::run(c),
        Command::Keygen(args) => release_cmd::run_keygen(&args, cli.quiet),
        Command::Release { cmd } => release_cmd::run_release(&cmd, cli.quiet),
    }
}
