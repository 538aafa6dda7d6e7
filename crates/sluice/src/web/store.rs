//! An upload from the web app's page run by `sluice-session`'s transfer machines, as a CLI
//! upload is: the page runs a `Sending` in its module (`sluice-wasm`'s machines), the server
//! runs [`Receiving`] on a request's stream of the page's WebTransport session with the CLI's
//! messages (the page's manifest, this end's plan with its resume offers of a partial file
//! kept from an earlier try, the digests, the repair rounds) and the CLI's file plane
//! (planning under the overwrite policy, partial files, verified placement). The bytes come on
//! the page's [`Carrier`]; everything else is the quinn driver's own (`session::drive`).
//!
//! A page's upload is one file at its own path ([`Target::File`]), or several files into a
//! folder in one run ([`Target::Folder`]: a folder of small files costs the machines' round
//! trips once, not once a file): the plan, the overwrite policy, the resume offers and the
//! verification are per file, as in a CLI upload of several files.
//!
//! A partial file an HTTPS try of the same source left ([`super::upload`]) is taken over once
//! the plan holds the path's claim, when it holds more whole blocks than the machines' own
//! ([`super::partial`]): its blocks are offered as any resume's, and kept only where the page's
//! file has the same BLAKE3.

use std::sync::Arc;

use sluice_session::{Receiving, Timeouts};

use super::fetch::{carried, tell_failed};
use super::upload::{Policy, free_name};
use crate::datapath::Carrier;
use crate::session::channel::blocking;
use crate::session::drive::{Destination, Wire, run_receiving};
use crate::session::{Access, Overwrite, SessionError};
use crate::tree::ReceiveOptions;

/// Where a page's upload goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The page's one file, at this path (its own, as over HTTPS: a folder there is refused);
    /// `keep-both` gives it a free name.
    File(String),
    /// The page's files into this existing folder, each under its manifest path; `keep-both`
    /// is refused (it names one file's free name: such a file goes alone).
    Folder(String),
}

/// What a page's upload stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Files renamed into place.
    pub files: u64,
    /// Bytes of the page's files that were to move (the policy's kept ones not among them).
    pub size: u64,
    /// Bytes a partial file of an earlier try held, which did not move again.
    pub resumed: u64,
    /// Blocks received again in repair rounds.
    pub repaired: u64,
    /// Existing files replaced.
    pub replaced: u64,
    /// Existing files the policy kept (the page's did not move).
    pub kept: u64,
    /// Where the file went, as the page names paths, when `keep-both` gave it a free name.
    pub renamed: Option<String>,
}

/// Receives the page's files at `target` (beneath `access`'s root) by `policy`, on a
/// request's stream of `conn`, their bytes on `carrier`. With [`Target::File`], `keep-both`
/// and a file at its path, the page's file goes to the next free name (`name (n).ext`).
/// Whatever fails, the page hears why on the stream (a `Failed` in the machine's framing,
/// paths as it named them) unless it failed first; the error is returned too.
pub async fn receive_files(
    conn: &quinn::Connection,
    (send, recv): (&mut quinn::SendStream, &mut quinn::RecvStream),
    access: Arc<Access>,
    (target, policy): (Target, Policy),
    carrier: Arc<dyn Carrier>,
) -> Result<Stored, SessionError> {
    let root = access.root().to_owned();
    let overwrite = match policy {
        Policy::Overwrite(overwrite) => overwrite,
        Policy::KeepBoth => Overwrite::Refuse,
    };
    // The page's mode and time go with its files (`if-newer` compares the time).
    // What an HTTPS try of the same source left is offered for resume (`partial`).
    let options = ReceiveOptions {
        overwrite,
        preserve: true,
        adopt: Some(super::partial::take_https_partial),
        ..ReceiveOptions::default()
    };
    let (path, into) = match target {
        Target::File(path) => (path, false),
        Target::Folder(path) => (path, true),
    };
    let asked = path.clone();
    let planned = blocking(move || {
        let mut options = options;
        let dest = access.incoming(&asked, &mut options)?;
        let fs = access.confined(&asked)?;
        if into {
            // The files land in it under their own names: it must be a folder (else the plan
            // would take `dest` for a single file's new name), as the plan sees folders.
            if !fs.is_dir(&dest) {
                return Err(SessionError::Refused(format!("{asked}: not a folder")));
            }
            if policy == Policy::KeepBoth {
                let why = format!("{asked}: keep both is for one file at its own path");
                return Err(SessionError::Refused(why));
            }
            return Ok((dest, options, None));
        }
        // A page's upload of one file names its own path (as over HTTPS): never a folder it
        // lands in.
        let found = fs.symlink_metadata(&dest).ok();
        if found.as_ref().is_some_and(std::fs::Metadata::is_dir) {
            return Err(SessionError::Refused(format!("{asked}: is a folder")));
        }
        let renamed = match policy {
            Policy::KeepBoth if found.is_some() => Some(free_name(&fs, &dest, &asked)?),
            _ => None,
        };
        Ok((renamed.clone().unwrap_or(dest), options, renamed))
    })
    .await;
    let (dest, options, renamed) = match planned {
        Ok(planned) => planned,
        Err(err) => {
            tell_failed(send, &err, &root).await;
            return Err(err);
        }
    };
    let renamed = renamed.map(|to| {
        let name = to.file_name().unwrap_or_default().to_string_lossy().into_owned();
        match path.trim_end_matches('/').rsplit_once('/') {
            Some((parent, _)) => format!("{parent}/{name}"),
            None => name,
        }
    });
    let machine = Receiving::new(std::time::Instant::now(), Timeouts::default());
    let channels = carried(conn, carrier)?;
    let mut wire = Wire::new(conn, send, recv);
    wire.hide = Some(&root);
    let destination = Destination { dest, options, dry_run: false, early: None };
    let received = run_receiving(machine, &mut wire, &channels, destination, None).await;
    let told = wire.told;
    drop(wire);
    let received = match received {
        Ok(received) => received,
        Err(err) => {
            if !told {
                tell_failed(send, &err, &root).await;
            }
            return Err(err);
        }
    };
    Ok(Stored {
        files: received.committed.files,
        size: received.size,
        resumed: received.received.resumed,
        repaired: received.received.repaired,
        replaced: received.replaced,
        kept: received.kept,
        renamed,
    })
}
