//! Carrying a manifest on a request's stream: in parts that each fit a frame, the last marked.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::SessionError;
use super::channel::{REPLY_TIMEOUT, frame_error};
use super::messages::{ManifestPart, read_message, write_message};
use crate::tree::Entry;
use crate::tree::manifest::{MAX_ENTRIES, MAX_TEXT_BYTES};

/// A part's entries stop growing past this much path and target text (well under the 1 MiB
/// frame with the fixed fields of each entry).
const PART_TEXT_BYTES: usize = 256 << 10;
/// Entries per part at most.
const PART_ENTRIES: usize = 2048;

/// Sends `entries` as `Manifest` parts (`wrap` makes the message); an empty manifest is one
/// empty last part.
pub(crate) async fn send_manifest<M: Serialize>(
    send: &mut quinn::SendStream,
    conn: &quinn::Connection,
    entries: &[Entry],
    wrap: impl Fn(ManifestPart) -> M,
) -> Result<(), SessionError> {
    let mut start = 0;
    loop {
        let (mut end, mut text) = (start, 0);
        while end < entries.len() && end - start < PART_ENTRIES && text < PART_TEXT_BYTES {
            let e = &entries[end];
            text += e.path.len() + e.target.as_ref().map_or(0, String::len);
            end += 1;
        }
        let last = end == entries.len();
        let part = ManifestPart { entries: entries[start..end].to_vec(), last };
        write_message(send, &wrap(part)).await.map_err(|e| frame_error(e, conn))?;
        if last {
            return Ok(());
        }
        start = end;
    }
}

/// Reads `Manifest` parts until the last (`unwrap` takes the part out of a message, or says
/// why the message ends the request), at most [`MAX_ENTRIES`] entries.
pub(crate) async fn recv_manifest<M: DeserializeOwned>(
    recv: &mut quinn::RecvStream,
    conn: &quinn::Connection,
    unwrap: impl Fn(M) -> Result<ManifestPart, SessionError>,
) -> Result<Vec<Entry>, SessionError> {
    let mut entries = Vec::new();
    let mut text = 0;
    loop {
        let msg = read_message(recv, REPLY_TIMEOUT).await.map_err(|e| frame_error(e, conn))?;
        let part = unwrap(msg)?;
        if entries.len() + part.entries.len() > MAX_ENTRIES {
            return Err(SessionError::Protocol(format!(
                "a manifest of more than {MAX_ENTRIES} entries"
            )));
        }
        text += part
            .entries
            .iter()
            .map(|e| e.path.len() + e.target.as_ref().map_or(0, String::len))
            .sum::<usize>();
        if text > MAX_TEXT_BYTES {
            return Err(SessionError::Protocol(format!(
                "a manifest of more than {} MiB of names",
                MAX_TEXT_BYTES >> 20
            )));
        }
        entries.extend(part.entries);
        if part.last {
            return Ok(entries);
        }
    }
}
