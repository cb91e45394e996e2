//! The `germline` command: parses arguments and calls the component crates.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "germline",
    version,
    about = "Run signed MCP tool servers under germline execution"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the groups Plan forms for a call.
    Plan,
    #[command(flatten)]
    Sandbox(germline_sandbox::cli::Command),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan => std::process::ExitCode::SUCCESS,
        Command::Sandbox(c) => germline_sandbox::cli::run(c),
    }
}
