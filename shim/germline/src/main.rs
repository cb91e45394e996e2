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
    /// Write a cosign-compatible key pair (cosign.key, cosign.pub).
    Keygen(germline_release::cli::KeygenArgs),
    /// Pack, sign, publish, verify and inspect signed releases.
    Release {
        #[command(subcommand)]
        cmd: germline_release::cli::ReleaseCmd,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan => std::process::ExitCode::SUCCESS,
        Command::Keygen(a) => germline_release::cli::run_keygen(&a),
        Command::Release { cmd } => germline_release::cli::run_release(&cmd),
    }
}
