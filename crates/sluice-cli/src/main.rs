//! The `sluice` command: thin glue over the `sluice` library.
//!
//! Arguments are parsed in two stages: clap validates their shape, then each command checks what
//! needs the system (files, addresses) before any network activity.

mod between;
mod browse;
mod config;
mod connect;
mod cp;
mod demo;
mod exit;
mod jobs;
mod relayed;
mod remote;
mod serve;
mod show;
mod ssh;
mod sweep;
mod web;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The port a server listens on unless told otherwise, and a client connects to.
pub(crate) const DEFAULT_PORT: u16 = 7733;

/// Sluice: fast, reliable, encrypted file transfer over UDP for long, lossy, fast paths.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about, long_about = None, after_help = exit::EXIT_CODES)]
struct Cli {
    /// More log output (repeat for more).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve a directory to clients (download and upload).
    ///
    /// Example: sluice serve --root /data --tokens /etc/sluice/tokens
    /// With the browser file manager: sluice serve --root /data --tokens /etc/sluice/tokens
    /// --web 0.0.0.0:8443 (then open https://HOST:8443/ and log in with a token)
    Serve(serve::ServeArgs),
    /// Copy files and trees to or from a server, scp style; or between two servers
    ///
    /// Examples:
    ///   SLUICE_TOKEN=... sluice cp server:data/big.bin ./big.bin
    ///   sluice cp -r --token-file tok ./results a.bin server:incoming/
    ///   sluice cp -r --overwrite if-different server:projects/run7 /scratch/
    ///
    /// Between two servers (third party): the destination reads from the source directly,
    /// this machine carries control messages and progress only, and the copy goes on if it
    /// goes away. Each server's token comes from SLUICE_TOKEN_<HOST> (the name in capitals,
    /// other characters as _), its config section's token_file, or SLUICE_TOKEN; a failure
    /// names the server it came from:
    ///   SLUICE_TOKEN_DTN=... SLUICE_TOKEN_HPC=... sluice cp dtn:run7/raw.h5 hpc:incoming/
    ///   sluice cp -r --overwrite if-different dtn:run7 hpc:scratch/
    ///
    /// Where a firewall blocks UDP, the copy goes over TCP by itself (--transport auto, the
    /// default: it says so once), on parallel TCP streams (4 at first, more while they help,
    /// fewer on a shared path; --channels N fixes the count): slower than UDP on long lossy
    /// paths, where a lost segment holds up its stream. To choose:
    ///   sluice cp --transport tcp big.bin server:      # or udp; SLUICE_TRANSPORT too
    #[command(verbatim_doc_comment, after_help = exit::EXIT_CODES)]
    Cp(cp::CpArgs),
    /// List a directory on a server (one level), or show a file: the server's view within its
    /// root.
    ///
    /// Examples:
    ///   sluice ls server:
    ///   sluice ls -l server:projects/run7
    #[command(verbatim_doc_comment, after_help = exit::EXIT_CODES)]
    Ls(browse::LsArgs),
    /// List what a server does for this token without a client, and what it did lately:
    /// third-party copies it pulls (sluice cp dtn:x hpc:) and relayed uploads it collects
    /// (sluice cp --relay ...), with their progress; a stalled relayed upload names the byte
    /// ranges it lacks (the same copy run again at the sender moves only those). Needs the
    /// token's write right.
    ///
    /// Examples:
    ///   sluice jobs hpc
    ///   sluice jobs --json hpc
    #[command(verbatim_doc_comment, after_help = exit::EXIT_CODES)]
    Jobs(jobs::JobsArgs),
    /// Show the kind, size and modification time of a path on a server.
    ///
    /// Example: sluice stat server:data/big.bin
    #[command(after_help = exit::EXIT_CODES)]
    Stat(browse::StatArgs),
    /// Measure the path to a server: upload random test data with each packet size and channel
    /// count, print goodput and retransmissions, and recommend the best (--save puts them in
    /// the config file). The test file .sluice-sweep.bin stays on the server. With --ssh, each
    /// run starts its own one-shot server over ssh.
    ///
    /// Examples:
    ///   sluice sweep server
    ///   sluice sweep --size 256MiB --packet-sizes 1452,8952 --channels 1,2,4,8 --save lab:scratch
    ///   sluice sweep --ssh ann@lab:scratch
    #[command(verbatim_doc_comment, after_help = exit::EXIT_CODES)]
    Sweep(sweep::SweepArgs),
    /// Print a shell completion script, generated from this command line's definition.
    ///
    /// Example: sluice completions bash > /etc/bash_completion.d/sluice
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), generated from this command line's definition; with
    /// --dir, write one page per command there (sluice.1, sluice-cp.1, ...).
    ///
    /// Examples:
    ///   sluice man > /usr/local/share/man/man1/sluice.1
    ///   sluice man --dir /usr/local/share/man/man1
    #[command(verbatim_doc_comment)]
    Man {
        /// Write every page into this directory instead.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Run a local server, move a test file through it, verify it, and compare with TCP.
    ///
    /// Example: sluice demo --size 1GiB
    Demo(demo::DemoArgs),
}

/// Where a server keeps its identity, unless `--state-dir` says otherwise.
pub(crate) fn default_state_dir() -> PathBuf {
    directories::ProjectDirs::from("", "", "sluice")
        .map(|d| d.data_dir().to_path_buf())
        .unwrap_or_else(|| PathBuf::from(".sluice"))
}

/// The client's known-hosts file, unless `--known-hosts` says otherwise.
pub(crate) fn default_known_hosts() -> PathBuf {
    directories::ProjectDirs::from("", "", "sluice")
        .map(|d| d.config_dir().join("known_hosts"))
        .unwrap_or_else(|| PathBuf::from(".sluice/known_hosts"))
}

/// Where uploads keep what each path delivered (`--no-path-memory` turns it off); `None` when
/// the system names no cache directory.
pub(crate) fn default_path_memory() -> Option<PathBuf> {
    directories::ProjectDirs::from("", "", "sluice").map(|d| d.cache_dir().join("paths.json"))
}

/// Writes `shell`'s completion script for the whole command line on stdout.
fn print_completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut command = <Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut command, "sluice", &mut std::io::stdout());
    Ok(())
}

/// Writes the manual page of `sluice` on stdout, or every page into `dir`.
fn man(dir: Option<PathBuf>) -> anyhow::Result<()> {
    use anyhow::Context;
    let command = <Cli as clap::CommandFactory>::command();
    match dir {
        Some(dir) => clap_mangen::generate_to(command, &dir)
            .with_context(|| format!("cannot write the manual pages into {}", dir.display())),
        None => Ok(clap_mangen::Man::new(command).render(&mut std::io::stdout())?),
    }
}

/// Logs on stderr at the level `-v` or `RUST_LOG` asks; with `event_log`, also the data
/// channels' counters as JSON lines in that file.
fn init_logs(verbose: u8, event_log: Option<PathBuf>) -> anyhow::Result<()> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, filter, fmt};
    let default_level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let stderr = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level)),
        );
    let events = match event_log {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| exit::local_io(format!("--event-log {}: {e}", path.display())))?;
            let channels =
                // The channels' counters, and the sessions' and requests' own events and spans
                // (which say what each counter belongs to).
                filter::Targets::new()
                    .with_target("sluice::datapath", tracing::Level::DEBUG)
                    .with_target("sluice::session", tracing::Level::INFO);
            Some(
                fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(true)
                    .with_writer(std::sync::Mutex::new(file))
                    .with_filter(channels),
            )
        }
        None => None,
    };
    tracing_subscriber::registry().with(stderr).with(events).init();
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let event_log = match &cli.command {
        Command::Serve(args) => args.event_log.clone(),
        _ => None,
    };
    if let Err(e) = init_logs(cli.verbose, event_log) {
        return exit::report(&e);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return exit::report(&anyhow::anyhow!("cannot start the async runtime: {e}")),
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Cp(args) => cp::run(args).await,
            Command::Demo(args) => demo::run(args).await,
            Command::Ls(args) => browse::ls(args).await,
            Command::Stat(args) => browse::stat(args).await,
            Command::Jobs(args) => jobs::run(args).await,
            Command::Completions { shell } => print_completions(shell),
            Command::Man { dir } => man(dir),
            Command::Sweep(args) => sweep::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => exit::report(&e),
    }
}
