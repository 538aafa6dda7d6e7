//! A download to the web app's page run by `sluice-session`'s transfer machines, as a CLI
//! download is: the server runs [`Sending`] on a request's stream of the page's WebTransport
//! session, with the CLI's messages in their framing (the manifest, the page's plan with its
//! resume offers, the digests, the repair rounds), and the page runs a `Receiving` in its
//! module (`sluice-wasm`'s machines). The bytes take the page's [`Carrier`] (its session's
//! streams) in place of UDP channels; everything else is the quinn driver's own
//! (`session::drive`), so the checks, the verification and the failures are the CLI's.

use std::path::Path;
use std::sync::{Arc, LazyLock};

use sluice_proto::config::ChannelConfig;
use sluice_session::messages::failed_frame;
use sluice_session::negotiate::Negotiated;
use sluice_session::options::Links;
use sluice_session::{Sending, Timeouts};

use crate::datapath::Carrier;
use crate::session::channel::{ChannelSetup, blocking};
use crate::session::drive::{Channels, Wire, run_sending, unrooted};
use crate::session::keys::{Role, SessionId};
use crate::session::{Access, SessionError};
use crate::tree::WalkOptions;

/// What a page's download moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Files the page took (those its overwrite policy kept are not among them).
    pub files: usize,
    /// Bytes of those files.
    pub size: u64,
    /// Bytes that moved in the first phase (a resume's kept bytes did not).
    pub moved: u64,
    /// Blocks sent again in repair rounds.
    pub repaired: u64,
}

/// The settings a carried phase's setup names; a carrier's transport has its own (its
/// connection's controller), so none of them governs the bytes.
static CARRIED: LazyLock<ChannelConfig> = LazyLock::new(ChannelConfig::default);

/// A server's data path whose bytes all take `carrier`.
pub(super) fn carried(
    conn: &quinn::Connection,
    carrier: Arc<dyn Carrier>,
) -> Result<Channels<'_>, SessionError> {
    let negotiated =
        Negotiated::from_spec(&Negotiated::proposal(&CARRIED, 1)).map_err(SessionError::Config)?;
    Ok(Channels {
        setup: ChannelSetup {
            conn,
            role: Role::Server,
            session_id: SessionId([0; 16]),
            negotiated,
            base: &CARRIED,
            request_id: 0,
            phase: 0,
            streams: None,
            udp_blocked: None,
        },
        fault: None,
        memory: None,
        carrier: Some(carrier),
    })
}

/// Tells the page why its transfer failed, where the machine did not (it failed before its
/// machine ran, or the machine's own words did not go out): a `Failed` in the machines' framing,
/// with paths as the page named them.
pub(super) async fn tell_failed(send: &mut quinn::SendStream, err: &SessionError, root: &Path) {
    let frame = failed_frame(err.code(), &unrooted(&err.detail(), root));
    let _ = send.write_all(&frame).await;
}

/// How a page's download walks what it asked for: folders whole, links followed within the
/// root ([`Access::outgoing`] confines the walk).
fn download_walk() -> WalkOptions {
    WalkOptions { recursive: true, links: Links::Follow, confine: None }
}

/// What a page's download of `requested` (a path beneath `access`'s root; a folder whole)
/// would send: the entries of its manifest, in order (a folder's own name first in each
/// path), and how many were left out. The page lists a folder it downloads this way, in one
/// request, where a walk of it one level at a time took a round trip a level. Right `read`,
/// as the download's. Blocks: the walk reads the tree.
pub fn download_tree(
    access: &Access,
    requested: &str,
) -> Result<(Vec<crate::tree::manifest::Entry>, u64), SessionError> {
    let outgoing = access.outgoing(&[requested.to_owned()], download_walk(), false)?;
    Ok((outgoing.entries, outgoing.skipped.len() as u64))
}

/// Sends `requested` (paths beneath `access`'s root, folders whole, links followed within it)
/// to the page on a request's stream of `conn`, its bytes on `carrier`; `early`: right behind
/// the manifest, before the page's `Want` (an early start, [`Sending::new_early`]: the page
/// holds nothing of the files). Whatever fails, the page hears why on the stream (a `Failed`
/// in the machine's framing, paths as it named them) unless it failed first; the error is
/// returned too.
pub async fn send_files(
    conn: &quinn::Connection,
    (send, recv): (&mut quinn::SendStream, &mut quinn::RecvStream),
    access: Arc<Access>,
    (requested, early): (Vec<String>, bool),
    carrier: Arc<dyn Carrier>,
) -> Result<Fetched, SessionError> {
    let root = access.root().to_owned();
    let outgoing = match blocking(move || access.outgoing(&requested, download_walk(), false)).await
    {
        Ok(outgoing) => outgoing,
        Err(err) => {
            tell_failed(send, &err, &root).await;
            return Err(err);
        }
    };
    let (now, timeouts) = (std::time::Instant::now(), Timeouts::default());
    let machine = match early {
        // No ports: the carrier takes the bytes.
        true => Sending::new_early(now, &outgoing.entries, timeouts, Vec::new()),
        false => Sending::new(now, &outgoing.entries, timeouts),
    };
    let channels = carried(conn, carrier)?;
    let mut wire = Wire::new(conn, send, recv);
    wire.hide = Some(&root);
    let sent = run_sending(machine, &mut wire, &channels, &outgoing, None, None).await;
    let told = wire.told;
    drop(wire);
    let sent = match sent {
        Ok(sent) => sent,
        Err(err) => {
            if !told {
                tell_failed(send, &err, &root).await;
            }
            return Err(err);
        }
    };
    Ok(Fetched {
        files: sent.wanted.len(),
        size: sent.size,
        moved: sent.sent.moved,
        repaired: sent.sent.repaired,
    })
}
