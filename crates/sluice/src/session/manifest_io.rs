//! A listing on a request's stream: `Manifest` parts that each fit a frame, the last marked
//! (`sluice_session::transfer` splits and joins them; a transfer's own manifest goes through
//! its machines).

use super::SessionError;
use super::channel::{REPLY_TIMEOUT, frame_error};
use super::messages::{Answer, read_message, write_message};
use crate::tree::Entry;
use sluice_session::transfer::{ManifestAssembler, manifest_parts};

/// Sends `entries` as `Manifest` answers; an empty listing is one empty last part.
pub(crate) async fn send_listing(
    send: &mut quinn::SendStream,
    conn: &quinn::Connection,
    entries: &[Entry],
) -> Result<(), SessionError> {
    for part in manifest_parts(entries) {
        write_message(send, &Answer::Manifest(part)).await.map_err(|e| frame_error(e, conn))?;
    }
    Ok(())
}

/// Reads `Manifest` answers until the last, within the manifest limits; a `Failed` is the
/// server's error.
pub(crate) async fn recv_listing(
    recv: &mut quinn::RecvStream,
    conn: &quinn::Connection,
) -> Result<Vec<Entry>, SessionError> {
    let mut whole = ManifestAssembler::default();
    loop {
        let msg = read_message(recv, REPLY_TIMEOUT).await.map_err(|e| frame_error(e, conn))?;
        let part = match msg {
            Answer::Manifest(part) => part,
            Answer::Failed { code, message } | Answer::Refused { code, message } => {
                return Err(SessionError::from_server(code, message));
            }
            other => {
                return Err(SessionError::Protocol(format!("expected Manifest, got {other:?}")));
            }
        };
        if let Some(entries) = whole.add(part).map_err(SessionError::Protocol)? {
            return Ok(entries);
        }
    }
}
