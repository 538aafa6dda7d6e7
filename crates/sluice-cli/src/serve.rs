//! `sluice serve`: serve one directory to many clients.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use sluice::session::{
    Credentials, DialRule, Server, ServerConfig, SpoolConfig, ThirdParty, ThirdPartyConfig,
};
use sluice::settings::ServerFile;

use crate::ssh::{HANDOFF, HANDOFF_VERSION};
use crate::{exit, web};

/// Arguments of `sluice serve`. Each flag may come from its environment variable, else from
/// the server's config file (`--config`, keys named like the flags: `root`, `listen`,
/// `state_dir`, `tokens`, `max_channels`).
#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// Directory to serve; clients cannot read or write outside it.
    #[arg(long, env = "SLUICE_ROOT")]
    root: Option<PathBuf>,
    /// Address and port to listen on [default: 0.0.0.0:7733].
    #[arg(long, env = "SLUICE_LISTEN")]
    listen: Option<SocketAddr>,
    /// Where the server keeps its identity key and certificate (created on first start).
    #[arg(long, env = "SLUICE_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// File of accepted client tokens, one per line (must not be readable by others).
    #[arg(long, env = "SLUICE_TOKENS")]
    tokens: Option<PathBuf>,
    /// The most data channels one transfer may use (default: one per core).
    #[arg(long, env = "SLUICE_MAX_CHANNELS", value_parser = clap::value_parser!(u32).range(1..=64))]
    max_channels: Option<u32>,
    /// Serve the counters (sessions, transfers, bytes, retransmissions, errors) in the
    /// Prometheus text format over HTTP on this address, at /metrics.
    #[arg(long, env = "SLUICE_METRICS", value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Serve the browser file manager and its API over HTTPS on this address (open
    /// https://ADDR/ and log in with a token). The certificate is --web-cert/--web-key, else
    /// the server's own self-signed identity (the fingerprint it prints).
    #[arg(long, env = "SLUICE_WEB", value_name = "ADDR")]
    web: Option<SocketAddr>,
    /// Transfers of the web app over WebTransport (HTTP/3 over QUIC) on the --web address's
    /// port over UDP: on (the default; the page falls back to HTTPS where the browser cannot
    /// reach it, and says so) or off. Its certificate is its own: self-signed ECDSA P-256 of 13
    /// days, replaced every 6, handed to logged-in pages by its hash.
    #[arg(long, env = "SLUICE_WEB_TRANSPORT", value_name = "on|off")]
    web_transport: Option<String>,
    /// WebTransport sessions (QUIC connections) a page opens and spreads each transfer's blocks
    /// over: a browser carries one connection's download at only about a third of a long, lossy
    /// path (docs/webtransport.md). 1 to 16.
    #[arg(long, env = "SLUICE_WEB_TRANSPORT_LANES", value_name = "N", default_value_t = web::wt::LANES,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    web_transport_lanes: u32,
    /// The web app's certificate chain (PEM; with --web-key).
    #[arg(long, env = "SLUICE_WEB_CERT", value_name = "FILE", requires = "web_key")]
    web_cert: Option<PathBuf>,
    /// The web app's private key (PEM, owner-only; with --web-cert).
    #[arg(long, env = "SLUICE_WEB_KEY", value_name = "FILE", requires = "web_cert")]
    web_key: Option<PathBuf>,
    /// Append a per-transfer event log here: each data channel's counters (rate, RTT, queue,
    /// packets sent, retransmitted and lost, or received, duplicated and NAKed) four times a
    /// second, as JSON lines naming the session and request (MCDTP's network log).
    #[arg(long, env = "SLUICE_EVENT_LOG", value_name = "FILE")]
    pub(crate) event_log: Option<PathBuf>,
    /// Third-party transfers (a client moving files from one server to another without
    /// carrying them): off, pull (take jobs: read from other servers into this one), push
    /// (grant other servers reads of this one's files), or both [default: both; a token still
    /// needs the read right to grant and the write right to start a job].
    #[arg(long, env = "SLUICE_THIRD_PARTY", value_name = "MODE")]
    third_party: Option<String>,
    /// As a third-party destination, dial only sources that match one of these: a fingerprint
    /// (SHA256:...), an address, or a network (198.18.0.0/15). Repeat, or separate with
    /// commas [default: any source the client names].
    #[arg(long, env = "SLUICE_THIRD_PARTY_DIAL", value_name = "RULE", value_delimiter = ',')]
    third_party_dial: Vec<String>,
    /// Also listen on TCP, on the same address and port, for clients whose path blocks UDP
    /// (their sessions and data go over TCP): on (the default) or off.
    #[arg(long, env = "SLUICE_TCP", value_name = "on|off")]
    tcp: Option<String>,
    /// Be a relay too (FSP striping, docs/relay.md): keep senders' sealed blocks in this
    /// directory until their collector takes them. Tokens need the relay right to deposit.
    #[arg(long, env = "SLUICE_SPOOL", value_name = "DIR")]
    spool: Option<PathBuf>,
    /// The most bytes the spool holds (e.g. 200GB); a deposit beyond it is answered busy.
    #[arg(long, env = "SLUICE_SPOOL_MAX", value_name = "SIZE")]
    spool_max: Option<String>,
    /// Delete blocks nobody collected this long after their transfer's last deposit, in
    /// hours [default: 24].
    #[arg(long, env = "SLUICE_SPOOL_EXPIRY_HOURS", value_name = "HOURS")]
    spool_expiry_hours: Option<u64>,
    /// Start every download afresh: do not keep what each path delivered (in the state
    /// directory's paths.json) to start the next download to it near that rate.
    #[arg(long, env = "SLUICE_NO_PATH_MEMORY")]
    no_path_memory: bool,
    /// The server's config file (TOML; flags and their environment variables win over it).
    #[arg(long, env = "SLUICE_SERVER_CONFIG")]
    config: Option<PathBuf>,
    /// Serve one session, as `sluice cp --ssh` asks over ssh: make a new identity (in memory
    /// only) and a one-time token, print them on stdout as one line, serve the first client
    /// presenting the token, and stop when its session ends, when stdin closes (the ssh
    /// connection is gone), or when no client came within 60 s. The root defaults to `/`; the
    /// address to the one the ssh connection came in on ($SSH_CONNECTION), any port.
    #[arg(long, conflicts_with_all = ["tokens", "state_dir", "config", "metrics", "event_log", "web", "spool"])]
    once: bool,
}

/// How long a one-shot server waits for its client.
const ONCE_WAIT: Duration = Duration::from_secs(60);

/// The server's config file, or nothing when none is named.
fn load_server_file(path: Option<&PathBuf>) -> anyhow::Result<ServerFile> {
    let Some(path) = path else { return Ok(ServerFile::default()) };
    let named = |why: String| exit::usage(format!("config file {}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| named(e.to_string()))?;
    ServerFile::parse(&text).map_err(named)
}

/// The third-party settings: the flags (or their variables), else the config file's.
fn third_party(
    mode: &Option<String>,
    dial: &[String],
    file: &ServerFile,
) -> anyhow::Result<ThirdPartyConfig> {
    let name = mode.as_deref().or(file.third_party.as_deref()).unwrap_or("both");
    let mode = ThirdParty::from_name(name)
        .ok_or_else(|| exit::usage(format!("--third-party {name}: use off, pull, push or both")))?;
    let rules =
        if dial.is_empty() { file.third_party_dial.as_deref().unwrap_or(&[]) } else { dial };
    let dial = rules
        .iter()
        .map(|r| {
            r.trim().parse::<DialRule>().map_err(|e| exit::usage(format!("--third-party-dial {e}")))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(ThirdPartyConfig { mode, dial })
}

/// The relay's spool, when `--spool` (or the config file's `spool`) asks for one.
fn spool(args: &ServeArgs, file: &ServerFile) -> anyhow::Result<Option<SpoolConfig>> {
    let Some(dir) = args.spool.as_ref().or(file.spool.as_ref()) else {
        if args.spool_max.is_some() || file.spool_max.is_some() {
            return Err(exit::usage("spool_max without spool: name the spool directory too"));
        }
        return Ok(None);
    };
    let Some(max) = args.spool_max.as_deref().or(file.spool_max.as_deref()) else {
        return Err(exit::usage("a spool needs its size: --spool-max (or spool_max), e.g. 200GB"));
    };
    let max_bytes = sluice::units::parse_size(max)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| exit::usage(format!("--spool-max {max:?}: a size above 0, e.g. 200GB")))?;
    let expiry = match args.spool_expiry_hours.or(file.spool_expiry_hours) {
        Some(0) => return Err(exit::usage("--spool-expiry-hours must be at least 1")),
        Some(h) => Duration::from_secs(h * 3600),
        None => sluice::session::relay::spool::DEFAULT_EXPIRY,
    };
    Ok(Some(SpoolConfig { dir: dir.clone(), max_bytes, expiry }))
}

/// Whether the web app's transfers go over WebTransport too: the flag, else the config
/// file's `web_transport`, else on.
fn web_transport(args: &ServeArgs, file: &ServerFile) -> anyhow::Result<bool> {
    let on = args.web_transport.as_deref().or(file.web_transport.as_deref());
    on_off("web-transport", on.unwrap_or("on"))
}

/// `on` or `off`, for the setting `name`.
fn on_off(name: &str, value: &str) -> anyhow::Result<bool> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(exit::usage(format!("--{name} {other}: use on or off"))),
    }
}

/// Runs the server until SIGINT or SIGTERM.
pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    if args.once {
        return once(args).await;
    }
    let file = load_server_file(args.config.as_ref())?;
    let spool = spool(&args, &file)?;
    let relays = crate::relayed::server_relays(&file)?;
    let wt_on = web_transport(&args, &file)?;
    let third_parties = third_party(&args.third_party, &args.third_party_dial, &file)?;
    let page_third_parties = third_parties.clone();
    let root = args.root.or(file.root).ok_or_else(|| {
        exit::usage("no directory to serve: pass --root, set SLUICE_ROOT, or put root in --config")
    })?;
    if !root.is_dir() {
        return Err(exit::usage(format!("--root {}: not a directory", root.display())));
    }
    let tokens = args.tokens.or(file.tokens).ok_or_else(|| {
        exit::usage("no tokens file: pass --tokens, set SLUICE_TOKENS, or put tokens in --config")
    })?;
    let max_channels = args.max_channels.or(file.max_channels);
    if max_channels.is_some_and(|n| !(1..=64).contains(&n)) {
        return Err(exit::usage("max_channels must be between 1 and 64"));
    }
    let state_dir = args.state_dir.or(file.state_dir).unwrap_or_else(crate::default_state_dir);
    let web_cert = match (args.web_cert.or(file.web_cert), args.web_key.or(file.web_key)) {
        (Some(cert), Some(key)) => web::tls::WebCert::Given { cert, key },
        (None, None) => web::tls::WebCert::Own { state_dir: state_dir.clone() },
        _ => return Err(exit::usage("web_cert and web_key go together: give both or neither")),
    };
    let web_addr = args.web.or(file.web);
    let config = ServerConfig {
        root,
        listen: args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], crate::DEFAULT_PORT))),
        credentials: Credentials::Stored { state_dir: state_dir.clone(), tokens_file: tokens },
        idle_timeout: std::time::Duration::from_secs(30),
        max_channels,
        digest_timeout: None,
        fault: None,
        third_party: third_parties,
        tcp: on_off("tcp", args.tcp.as_deref().or(file.tcp.as_deref()).unwrap_or("on"))?,
        spool,
        path_memory: !args.no_path_memory && file.path_memory != Some(false),
        relays,
    };
    let metrics_addr = args.metrics.or(file.metrics);
    let server = Server::bind(config).context("cannot start the server")?;
    let web = match metrics_addr {
        Some(addr) => Some(web::Listener::bind(addr, "metrics", web::Limits::METRICS).await?),
        None => None,
    };
    let wt_counters = std::sync::Arc::new(web::wt::Counters::default());
    let app = match web_addr {
        Some(addr) => {
            // After Server::bind: it made the identity if there was none.
            let (tls, fingerprint) = web::tls::load(&web_cert)?;
            let listener =
                web::Listener::bind(addr, "the web app", web::Limits::WEB).await?.with_tls(tls);
            let mut state = web::app::AppState::new(
                server.gate(),
                fingerprint,
                web::auth::LoginLimits::DEFAULT,
            );
            // Other servers in the page's panes, and copies between servers, as the server
            // takes part in third-party transfers.
            if page_third_parties.mode != sluice::session::ThirdParty::Off {
                state = state.with_servers(web::servers::ServerLinks {
                    listen: server.local_addr(),
                    fingerprint: server.fingerprint().clone(),
                    third_party: page_third_parties,
                });
            }
            // Over UDP on the port the web app got (its own for port 0).
            let wt = if wt_on {
                let udp = SocketAddr::new(addr.ip(), listener.local_addr().port());
                let wt = web::wt::WtListener::bind(udp, wt_counters.clone())?
                    .with_lanes(args.web_transport_lanes)
                    .with_path_memory(server.path_memory());
                state = state.with_wt(wt.shared());
                Some(wt)
            } else {
                None
            };
            Some((listener, state, wt))
        }
        None => None,
    };
    #[allow(clippy::print_stdout)]
    {
        println!(
            "sluice: serving on {} with fingerprint {}",
            server.local_addr(),
            server.fingerprint()
        );
        if let Some(web) = &web {
            println!("sluice: metrics on http://{}/metrics", web.local_addr());
        }
        if let Some((app, state, wt)) = &app {
            println!(
                "sluice: web app on https://{}/ with fingerprint {}",
                app.local_addr(),
                state.fingerprint
            );
            if let Some(wt) = wt {
                println!("sluice: web app transfers over WebTransport on udp {}", wt.local_addr()?);
            }
        }
    }
    let webtransport = app.as_ref().and_then(|(_, _, wt)| wt.as_ref()).map(|_| wt_counters);
    let state = web::WebState { metrics: server.metrics(), webtransport };
    let serving = server.run(shutdown_signal());
    // The HTTP sides stop when the server has: its last counters stay readable until then.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let serving = async move {
        let result = serving.await;
        let _ = stop.send(true);
        result
    };
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let metrics = async {
        if let Some(web) = web {
            web.serve(web::router(state), until_stopped(stopped.clone())).await;
        }
    };
    let app = async {
        if let Some((app, state, wt)) = app {
            let sweeping =
                web::app::sweep_partials(state.partials.clone(), until_stopped(stopped.clone()));
            let wt = async {
                if let Some(wt) = wt {
                    wt.serve(state.clone(), until_stopped(stopped.clone())).await;
                }
            };
            tokio::join!(
                app.serve(web::app::router(state.clone()), until_stopped(stopped.clone())),
                sweeping,
                wt
            );
        }
    };
    let (result, (), ()) = tokio::join!(serving, metrics, app);
    result?;
    Ok(())
}

/// `serve --once`: one session for a client that started this over ssh.
async fn once(args: ServeArgs) -> anyhow::Result<()> {
    let root = args.root.unwrap_or_else(|| PathBuf::from("/"));
    let listen = args.listen.unwrap_or_else(|| SocketAddr::new(ssh_local_ip(), 0));
    let mut secret = [0u8; 32];
    aws_lc_rs::rand::fill(&mut secret)
        .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
    let token: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let config = ServerConfig {
        root,
        listen,
        credentials: Credentials::OneTime { token: token.clone(), wait: ONCE_WAIT },
        idle_timeout: Duration::from_secs(30),
        max_channels: args.max_channels,
        digest_timeout: None,
        fault: None,
        // A one-shot server serves one client's copy; it takes no part in others'.
        third_party: ThirdPartyConfig { mode: ThirdParty::Off, dial: Vec::new() },
        // A client whose path blocks UDP reaches it over TCP, as ssh did.
        tcp: on_off("tcp", args.tcp.as_deref().unwrap_or("on"))?,
        spool: None,
        // It has no state directory to keep it in.
        path_memory: false,
        relays: Vec::new(),
    };
    let server = Server::bind(config).context("cannot start the one-shot server")?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{HANDOFF} {HANDOFF_VERSION} {} {} {token} {}",
            server.local_addr(),
            server.fingerprint(),
            cwd.display()
        )
        .and_then(|()| out.flush())
        .context("cannot hand the server's address to the client")?;
    }
    let stop = async {
        tokio::select! {
            () = stdin_closed() => {}
            () = shutdown_signal() => {}
        }
    };
    server.run(stop).await?;
    Ok(())
}

/// The local address of the ssh connection this runs under (the third word of
/// `SSH_CONNECTION`), else every IPv4 address.
fn ssh_local_ip() -> IpAddr {
    std::env::var("SSH_CONNECTION")
        .ok()
        .and_then(|v| v.split_whitespace().nth(2).and_then(|ip| ip.parse().ok()))
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

/// Completes when stdin reaches its end. A plain thread reads it: a blocking read cannot be
/// cancelled, and Tokio's stdin would hold the runtime's shutdown until it returned.
async fn stdin_closed() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new().name("stdin".into()).spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 256];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        drop(tx);
    });
    if spawned.is_ok() {
        let _ = rx.await;
    } else {
        std::future::pending::<()>().await;
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn args(flags: &[&str]) -> ServeArgs {
        Cli::try_parse_from([&["serve"], flags].concat()).unwrap().serve
    }

    #[test]
    fn the_spool_comes_from_the_flags_or_the_config_file_the_flags_winning() {
        let file = ServerFile::parse(
            "spool = \"/var/spool/sluice\"\nspool_max = \"2GB\"\nspool_expiry_hours = 6\n",
        )
        .unwrap();
        let from_file = spool(&args(&[]), &file).unwrap().unwrap();
        assert_eq!(from_file.dir, PathBuf::from("/var/spool/sluice"));
        assert_eq!((from_file.max_bytes, from_file.expiry.as_secs()), (2_000_000_000, 6 * 3600));
        let flags = args(&["--spool", "/s", "--spool-max", "1GB"]);
        let both = spool(&flags, &file).unwrap().unwrap();
        assert_eq!((both.dir, both.max_bytes), (PathBuf::from("/s"), 1_000_000_000));
        assert_eq!(both.expiry.as_secs(), 6 * 3600, "the file's expiry where no flag says");
        assert!(spool(&args(&[]), &ServerFile::default()).unwrap().is_none());
        let err = spool(&args(&["--spool", "/s"]), &ServerFile::default()).unwrap_err();
        assert!(err.to_string().contains("needs its size"), "{err}");
        let err = spool(&args(&["--spool-max", "1GB"]), &ServerFile::default()).unwrap_err();
        assert!(err.to_string().contains("without spool"), "{err}");
        let zero = ServerFile { spool_expiry_hours: Some(0), ..file };
        assert!(spool(&args(&[]), &zero).unwrap_err().to_string().contains("at least 1"));
    }

    #[test]
    fn web_transport_is_a_config_key_too() {
        let off = ServerFile::parse("web_transport = \"off\"").unwrap();
        let none = ServerFile::default();
        assert!(!web_transport(&args(&[]), &off).unwrap(), "the file's off");
        assert!(web_transport(&args(&[]), &none).unwrap(), "on by default");
        assert!(web_transport(&args(&["--web-transport", "on"]), &off).unwrap(), "the flag wins");
        assert!(!web_transport(&args(&["--web-transport", "off"]), &none).unwrap());
        let bad = ServerFile::parse("web_transport = \"maybe\"").unwrap();
        let err = web_transport(&args(&[]), &bad).unwrap_err().to_string();
        assert!(err.contains("use on or off"), "{err}");
        assert!(
            ServerFile::parse("web_transprot = \"off\"").unwrap_err().contains("web_transprot")
        );
    }
}
