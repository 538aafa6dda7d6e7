//! Network namespace helpers: create and remove the pair `PREFIX-a` / `PREFIX-b`, and run code
//! inside a namespace on a dedicated thread.
//!
//! Namespaces are made with `ip netns add` (iproute2), so they are visible to `ip netns exec`.
//! Each new namespace gets its loopback up and IPv6 switched off, so the kernel sends no
//! unsolicited packets (router solicitations, MLD reports) through the emulator.

use std::fs::File;
use std::net::Ipv4Addr;
use std::process::Command;

use nix::sched::{CloneFlags, setns};

/// Address of namespace a's TUN device.
pub const A_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Address of namespace b's TUN device.
pub const B_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
/// Prefix length of both TUN addresses: 198.18.0.0/15 is routed through the TUN in each
/// namespace, so a reaches b (and every other address of the range) through the emulator.
pub const PREFIX_LEN: u8 = 15;
/// Name of the TUN device in each namespace.
pub const TUN_NAME: &str = "linkem0";

/// Errors of the namespace helpers.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// A command could not be started.
    #[error("cannot run `{cmd}`: {source}")]
    Spawn {
        /// The command line.
        cmd: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Failed {
        /// The command line.
        cmd: String,
        /// What it printed on standard error.
        stderr: String,
    },
    /// Entering a namespace failed.
    #[error("cannot enter network namespace {name}: {source}")]
    Enter {
        /// The namespace.
        name: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A namespace that should exist does not.
    #[error(
        "network namespace {name} does not exist; create it with `linkem netns up --prefix {prefix}`"
    )]
    Missing {
        /// The namespace.
        name: String,
        /// Its pair's prefix.
        prefix: String,
    },
    /// A name is not acceptable.
    #[error("bad namespace prefix `{0}`: use 1-40 characters from [A-Za-z0-9_.-]")]
    BadPrefix(String),
}

/// Runs `ip ARGS...`, returning its standard output.
pub fn ip(args: &[&str]) -> Result<String, NetnsError> {
    run("ip", args)
}

/// Runs a program and returns its standard output, or an error with its standard error.
pub fn run(program: &str, args: &[&str]) -> Result<String, NetnsError> {
    let cmd = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| NetnsError::Spawn { cmd: cmd.clone(), source })?;
    if !out.status.success() {
        return Err(NetnsError::Failed {
            cmd,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The two namespace names for a prefix: `(PREFIX-a, PREFIX-b)`.
pub fn pair_names(prefix: &str) -> (String, String) {
    (format!("{prefix}-a"), format!("{prefix}-b"))
}

fn check_prefix(prefix: &str) -> Result<(), NetnsError> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 40
        && prefix.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if ok { Ok(()) } else { Err(NetnsError::BadPrefix(prefix.to_string())) }
}

/// Whether a namespace of this name exists (in `ip netns list`).
pub fn exists(name: &str) -> bool {
    std::path::Path::new("/var/run/netns").join(name).exists()
}

/// Creates one namespace with loopback up and IPv6 off.
pub fn create_one(name: &str) -> Result<(), NetnsError> {
    ip(&["netns", "add", name])?;
    let setup = || -> Result<(), NetnsError> {
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        ip(&[
            "netns",
            "exec",
            name,
            "sysctl",
            "-q",
            "-w",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])?;
        Ok(())
    };
    setup().inspect_err(|_| {
        let _ = ip(&["netns", "del", name]);
    })
}

/// Removes one namespace if it exists.
pub fn remove_one(name: &str) -> Result<(), NetnsError> {
    if exists(name) { ip(&["netns", "del", name]).map(drop) } else { Ok(()) }
}

/// Removes the pair `PREFIX-a` / `PREFIX-b` (those of them that exist).
pub fn remove_pair(prefix: &str) -> Result<(), NetnsError> {
    check_prefix(prefix)?;
    let (a, b) = pair_names(prefix);
    let ra = remove_one(&a);
    let rb = remove_one(&b);
    ra.and(rb)
}

/// A pair of namespaces `PREFIX-a` and `PREFIX-b`. Removed on drop unless [`NetnsPair::keep`]
/// was called.
#[derive(Debug)]
pub struct NetnsPair {
    prefix: String,
    a: String,
    b: String,
    remove_on_drop: bool,
}

impl NetnsPair {
    /// Creates both namespaces; fails (creating nothing) if either exists.
    pub fn create(prefix: &str) -> Result<Self, NetnsError> {
        check_prefix(prefix)?;
        let (a, b) = pair_names(prefix);
        create_one(&a)?;
        if let Err(e) = create_one(&b) {
            let _ = remove_one(&a);
            return Err(e);
        }
        Ok(NetnsPair { prefix: prefix.to_string(), a, b, remove_on_drop: true })
    }

    /// A handle on an existing pair (for example made by `linkem netns up`), not removed on drop.
    pub fn existing(prefix: &str) -> Result<Self, NetnsError> {
        check_prefix(prefix)?;
        let (a, b) = pair_names(prefix);
        for n in [&a, &b] {
            if !exists(n) {
                return Err(NetnsError::Missing { name: n.clone(), prefix: prefix.to_string() });
            }
        }
        Ok(NetnsPair { prefix: prefix.to_string(), a, b, remove_on_drop: false })
    }

    /// A unique prefix for tests: `lkm-<pid>-<n>-<tag>`, with a process-wide counter `n`.
    pub fn unique_prefix(tag: &str) -> String {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        format!("lkm-{}-{}-{tag}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Name of namespace a.
    pub fn a(&self) -> &str {
        &self.a
    }

    /// Name of namespace b.
    pub fn b(&self) -> &str {
        &self.b
    }

    /// Keeps the namespaces after this handle is dropped.
    pub fn keep(mut self) {
        self.remove_on_drop = false;
    }

    /// Removes both namespaces now.
    pub fn remove(mut self) -> Result<(), NetnsError> {
        self.remove_on_drop = false;
        remove_pair(&self.prefix)
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        if self.remove_on_drop {
            let _ = remove_pair(&self.prefix);
        }
    }
}

/// Moves the calling thread into the named network namespace (for good: use a dedicated
/// thread, see [`in_netns`]).
pub fn enter(name: &str) -> Result<(), NetnsError> {
    let err = |source| NetnsError::Enter { name: name.to_string(), source };
    let file = File::open(std::path::Path::new("/var/run/netns").join(name)).map_err(err)?;
    setns(&file, CloneFlags::CLONE_NEWNET).map_err(|e| err(e.into()))
}

/// Runs `f` on a new thread that has entered the named network namespace, and returns its
/// result. Sockets and devices opened by `f` belong to that namespace and can be used from any
/// thread afterwards.
pub fn in_netns<T, F>(name: &str, f: F) -> Result<T, NetnsError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let name = name.to_string();
    std::thread::Builder::new()
        .name(format!("netns-{name}"))
        .spawn(move || -> Result<T, NetnsError> {
            enter(&name)?;
            Ok(f())
        })
        .map_err(|source| NetnsError::Spawn { cmd: "thread spawn".into(), source })?
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Spawns a long-running thread inside the named namespace. The namespace is entered before
/// `f` runs; an error entering it is returned from the join.
pub fn spawn_in_netns<T, F>(
    name: &str,
    thread_name: &str,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<Result<T, NetnsError>>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let name = name.to_string();
    std::thread::Builder::new().name(thread_name.to_string()).spawn(move || {
        enter(&name)?;
        Ok(f())
    })
}

/// Whether the process runs as root (needed for namespaces and TUN devices).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
