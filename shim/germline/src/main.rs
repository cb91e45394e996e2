//! The `germline` command: parses arguments and calls the component crates.

mod broker_cmd;
mod plan_cmd;
mod release_cmd;
mod witness_cmd;

use std::process::ExitCode;

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
    /// Print the groups Plan forms for a call, in the order their copies run.
    Plan(plan_cmd::PlanArgs),
    /// Check a deployer policy file and print what it defines.
    Policy(plan_cmd::PolicyArgs),
    /// Serve a signed release to an MCP client over stdio, under germline execution.
    Run(germline_mcp::cli::RunArgs),
    /// Per-call latency through `germline run` for one tool under every runtime.
    RunBench(germline_eval::bench::BenchArgs),
    /// The paper's cost figures (Table VII, Fig. 4) on this machine: bench.json, bench.md, plots.
    Bench(germline_eval::suite::SuiteArgs),
    /// Serve signed releases to MCP clients over Streamable HTTP (bearer token, localhost only).
    Serve(germline_mcp::serve::ServeArgs),
    /// Remove what `run` and `serve` processes that died without stopping left behind
    /// (their germlines' cgroups and processes, their /run/germline directories).
    Gc,
    /// The broker sidecar, and its benchmark.
    Broker(broker_cmd::BrokerArgs),
    /// Witness records of the evidence layer: verify one offline, list them with dampening.
    Witness(witness_cmd::WitnessArgs),
    /// Evaluations: the security matrix of signed Trojans against every runtime.
    Eval(germline_eval::matrix::EvalArgs),
    #[command(flatten)]
    Sandbox(germline_sandbox::cli::Command),
    /// Write a cosign-compatible key pair (cosign.key, cosign.pub).
    Keygen(release_cmd::KeygenArgs),
    /// Pack, sign, publish, verify and inspect signed releases.
    Release {
        #[command(subcommand)]
        cmd: release_cmd::ReleaseCmd,
    },
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(args) => report(plan_cmd::run_plan(&args)),
        Command::Policy(args) => report(plan_cmd::run_policy(&args)),
        Command::Broker(args) => report(broker_cmd::run(&args)),
        Command::Eval(args) => report(germline_eval::matrix::run(&args)),
        Command::Witness(args) => match witness_cmd::run(&args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                eprintln!("germline: error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Run(args) => report(germline_mcp::cli::run(&args).map_err(Into::into)),
        Command::RunBench(args) => report(germline_eval::bench::run(&args).map_err(Into::into)),
        Command::Bench(args) => report(germline_eval::suite::run(&args).map_err(Into::into)),
        Command::Serve(args) => report(germline_mcp::serve::run(&args).map_err(Into::into)),
        Command::Sandbox(germline_sandbox::cli::Command::Status(a)) if a.id.is_none() => {
            report(germline_engine::status::run(a.json).map_err(Into::into))
        }
        Command::Gc => report(germline_engine::sweep::gc().map_err(Into::into)),
        Command::Sandbox(c) => germline_sandbox::cli::run(c),
        Command::Keygen(args) => release_cmd::run_keygen(&args),
        Command::Release { cmd } => release_cmd::run_release(&cmd),
    }
}
