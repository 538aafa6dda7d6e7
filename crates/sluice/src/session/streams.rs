//! A transfer's data over TCP streams, for a session that runs over TCP ([`super::tunnel`]):
//! how the streams are opened and joined to their request, and their keys.
//!
//! The client always dials (a firewall that lets the session's TCP connection through lets
//! these through too): for each stream of each data phase it connects to the server's TCP
//! port, sends the [`Preface::Data`] preface and a hello, and the server's [`Door`] hands the
//! connection to the request waiting for it. The hello names the session, the request and the
//! stream, with a tag only the two ends can make:
//!
//! ```text
//! session_id (16) | request_id (u64 BE) | stream (u32 BE) | tag (32)
//! ```
//!
//! The tag, the stream's AEAD keys and nothing else come from the session's TLS exporter under
//! [`STREAM_KEY_LABEL`] (not the UDP channels' label, so no key a channel used seals a record),
//! with the context of [`ChannelRef`]: `stream` is the stream's index plus
//! [`super::MAX_CHANNELS`] for each earlier phase. The tag is BLAKE3 keyed with the exported
//! hello key, over the first 28 bytes. A connection whose hello does not match what a request
//! waits for is closed; one that comes before its request waits a little ([`PARKED_FOR`]).

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use tracing::debug;

use super::keys::{ChannelRef, ChannelSecrets, KeyExporter, Role, SessionId};
use super::lock;
use super::tunnel::Preface;
use crate::datapath::DataError;
use crate::datapath::tcp::{StreamConfig, StreamParams};

/// Exporter label of the TCP data streams' secrets.
pub(crate) const STREAM_KEY_LABEL: &[u8] = b"EXPORTER-sluice-stream-v1";

/// Bytes of a hello after the preface.
pub(crate) const HELLO_BYTES: usize = 16 + 8 + 4 + 32;

/// How long a stream that came before its request waits for it.
const PARKED_FOR: Duration = Duration::from_secs(30);

/// Streams waiting for their request, in all the server; beyond them the oldest is closed.
const MAX_PARKED: usize = 256;

/// How long an end waits for its streams to open: the client for its connections, the server
/// for the client's.
pub(crate) const OPEN_WAIT: Duration = Duration::from_secs(10);

/// A stream's hello: which stream of which request it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct StreamKey {
    session_id: SessionId,
    request_id: u64,
    stream: u32,
}

impl StreamKey {
    fn of(at: &ChannelRef) -> StreamKey {
        StreamKey { session_id: at.session_id, request_id: at.request_id, stream: at.channel }
    }

    fn bytes(&self) -> [u8; 28] {
        let mut out = [0u8; 28];
        out[..16].copy_from_slice(&self.session_id.0);
        out[16..24].copy_from_slice(&self.request_id.to_be_bytes());
        out[24..].copy_from_slice(&self.stream.to_be_bytes());
        out
    }

    /// The hello's fields and its tag.
    pub(crate) fn parse(hello: &[u8; HELLO_BYTES]) -> (StreamKey, blake3::Hash) {
        let mut id = [0u8; 16];
        id.copy_from_slice(&hello[..16]);
        let request_id = u64::from_be_bytes(hello[16..24].try_into().unwrap_or_default());
        let stream = u32::from_be_bytes(hello[24..28].try_into().unwrap_or_default());
        let mut tag = [0u8; 32];
        tag.copy_from_slice(&hello[28..]);
        (StreamKey { session_id: SessionId(id), request_id, stream }, blake3::Hash::from(tag))
    }
}

/// One stream before it is open: its place, keys and hello tag.
pub(crate) struct PendingStream {
    key: StreamKey,
    tag: blake3::Hash,
    secrets: ChannelSecrets,
}

impl PendingStream {
    /// Derives stream `at`'s secrets from the session's exporter.
    pub(crate) fn derive(
        exporter: &impl KeyExporter,
        at: &ChannelRef,
    ) -> Result<Self, super::SessionError> {
        let secrets = ChannelSecrets::derive_labelled(exporter, STREAM_KEY_LABEL, at)?;
        let mut hello_key = [0u8; 32];
        exporter.export(&mut hello_key, STREAM_KEY_LABEL, &at.hello_context())?;
        let key = StreamKey::of(at);
        let tag = blake3::keyed_hash(&hello_key, &key.bytes());
        Ok(PendingStream { key, tag, secrets })
    }

    fn hello(&self) -> [u8; 8 + HELLO_BYTES] {
        let mut out = [0u8; 8 + HELLO_BYTES];
        out[..8].copy_from_slice(&Preface::Data.bytes());
        out[8..36].copy_from_slice(&self.key.bytes());
        out[36..].copy_from_slice(self.tag.as_bytes());
        out
    }
}

/// How an end gets its streams.
#[derive(Clone, Copy)]
pub(crate) enum Opener<'a> {
    /// The client: dials the server's TCP port.
    Dial(SocketAddr),
    /// The server: takes them from the door.
    Door(&'a Arc<Door>),
}

/// A phase's streams, to open on the data thread ([`StreamsPlan::open`]).
pub(crate) struct StreamsPlan {
    pub(crate) pending: Vec<PendingStream>,
    pub(crate) role: Role,
    pub(crate) aead: sluice_proto::crypto::Algorithm,
    pub(crate) config: StreamConfig,
    pub(crate) opener: OwnedOpener,
}

/// [`Opener`] as the data thread holds it.
pub(crate) enum OwnedOpener {
    Dial(SocketAddr),
    Door(Arc<Door>),
}

impl From<Opener<'_>> for OwnedOpener {
    fn from(opener: Opener<'_>) -> Self {
        match opener {
            Opener::Dial(addr) => OwnedOpener::Dial(addr),
            Opener::Door(door) => OwnedOpener::Door(door.clone()),
        }
    }
}

impl StreamsPlan {
    /// Opens every stream (within [`OPEN_WAIT`]), or fails naming why. The client dials them
    /// all at once: one round trip, however many.
    pub(crate) fn open(self, cancel: &AtomicBool) -> Result<Vec<StreamParams>, DataError> {
        let StreamsPlan { pending, role, aead, config, opener } = self;
        let streams: Vec<Result<TcpStream, DataError>> = match &opener {
            OwnedOpener::Dial(server) => std::thread::scope(|s| {
                let dials: Vec<_> =
                    pending.iter().map(|p| s.spawn(move || dial(*server, p))).collect();
                dials
                    .into_iter()
                    .map(|d| d.join().unwrap_or_else(|_| Err(dial_panicked())))
                    .collect()
            }),
            OwnedOpener::Door(door) => {
                pending.iter().map(|p| door.wait(p.key, p.tag, cancel, OPEN_WAIT)).collect()
            }
        };
        pending
            .into_iter()
            .zip(streams)
            .map(|(p, stream)| {
                Ok(StreamParams { stream: stream?, keys: p.secrets.keys(role, aead), config })
            })
            .collect()
    }
}

fn dial_panicked() -> DataError {
    DataError::Socket(std::io::Error::other("opening a TCP data stream: its thread panicked"))
}

fn dial(server: SocketAddr, pending: &PendingStream) -> Result<TcpStream, DataError> {
    let fail = |e: std::io::Error| {
        DataError::Socket(std::io::Error::new(
            e.kind(),
            format!("opening a TCP data stream to {server}: {e}"),
        ))
    };
    let mut stream = TcpStream::connect_timeout(&server, OPEN_WAIT).map_err(fail)?;
    stream.write_all(&pending.hello()).map_err(fail)?;
    Ok(stream)
}

/// The server's side: data streams that came in, handed to the requests that wait for them.
#[derive(Default)]
pub(crate) struct Door {
    slots: Mutex<Slots>,
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Door")
    }
}

#[derive(Default)]
struct Slots {
    waiting: HashMap<StreamKey, (blake3::Hash, mpsc::Sender<TcpStream>)>,
    parked: HashMap<StreamKey, (blake3::Hash, TcpStream, Instant)>,
}

impl Door {
    /// A stream came in with its hello (read by the listener): to its request, or parked until
    /// the request asks. A hello that does not match is closed.
    pub(crate) fn arrive(&self, hello: &[u8; HELLO_BYTES], stream: TcpStream) {
        let (key, tag) = StreamKey::parse(hello);
        let mut slots = lock(&self.slots);
        if let Some((expected, _)) = slots.waiting.get(&key) {
            if *expected != tag {
                debug!("a data stream with a wrong tag: closed");
                return;
            }
            if let Some((_, to)) = slots.waiting.remove(&key) {
                let _ = to.send(stream);
            }
            return;
        }
        let now = Instant::now();
        slots.parked.retain(|_, (_, _, at)| now.duration_since(*at) < PARKED_FOR);
        if slots.parked.len() >= MAX_PARKED
            && let Some(oldest) =
                slots.parked.iter().min_by_key(|(_, (_, _, at))| *at).map(|(k, _)| *k)
        {
            slots.parked.remove(&oldest);
        }
        slots.parked.insert(key, (tag, stream, now));
    }

    /// The stream `key` whose hello carries `tag`, once it came (within `within`).
    fn wait(
        &self,
        key: StreamKey,
        tag: blake3::Hash,
        cancel: &AtomicBool,
        within: Duration,
    ) -> Result<TcpStream, DataError> {
        let (to, from) = mpsc::channel();
        {
            let mut slots = lock(&self.slots);
            if let Some((presented, stream, _)) = slots.parked.remove(&key) {
                if presented == tag {
                    return Ok(stream);
                }
                debug!("a data stream with a wrong tag: closed");
            }
            slots.waiting.insert(key, (tag, to));
        }
        let deadline = Instant::now() + within;
        let result = loop {
            match from.recv_timeout(Duration::from_millis(20)) {
                Ok(stream) => break Ok(stream),
                Err(_) if cancel.load(Ordering::Relaxed) => break Err(DataError::Cancelled),
                Err(_) if Instant::now() >= deadline => {
                    break Err(DataError::Stream(format!(
                        "the client's TCP data stream did not come within {:.1} s",
                        within.as_secs_f64()
                    )));
                }
                Err(_) => {}
            }
        };
        if result.is_err() {
            let mut slots = lock(&self.slots);
            slots.waiting.remove(&key);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    /// A connected pair on loopback: (the dialled end, the accepted end).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let dialled = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (dialled, listener.accept().unwrap().0)
    }

    fn hello(key: &StreamKey, tag: &blake3::Hash) -> [u8; HELLO_BYTES] {
        let mut out = [0u8; HELLO_BYTES];
        out[..28].copy_from_slice(&key.bytes());
        out[28..].copy_from_slice(tag.as_bytes());
        out
    }

    #[test]
    fn the_door_hands_a_stream_only_to_the_request_whose_tag_it_carries() {
        let door = Door::default();
        let key = StreamKey { session_id: SessionId([7; 16]), request_id: 4, stream: 65 };
        let tag = blake3::keyed_hash(&[1; 32], &key.bytes());
        let forged = blake3::keyed_hash(&[2; 32], &key.bytes());
        let no = AtomicBool::new(false);
        let short = Duration::from_millis(100);
        // Came before its request, with the wrong tag: never handed over.
        let (_far, near) = pair();
        door.arrive(&hello(&key, &forged), near);
        assert!(matches!(door.wait(key, tag, &no, short), Err(DataError::Stream(_))));
        // Came before its request with the right tag: handed over at once.
        let (mut far, near) = pair();
        door.arrive(&hello(&key, &tag), near);
        let mut got = door.wait(key, tag, &no, short).unwrap();
        far.write_all(b"x").unwrap();
        let mut byte = [0u8; 1];
        std::io::Read::read_exact(&mut got, &mut byte).unwrap();
        assert_eq!(&byte, b"x", "the very connection that said hello");
        // Another stream of the same request is another key: not this one's.
        let other = StreamKey { stream: 66, ..key };
        let (_far, near) = pair();
        door.arrive(&hello(&other, &tag), near);
        assert!(door.wait(key, tag, &no, short).is_err());
        // A request that waits when the stream comes; a cancelled wait returns at once.
        std::thread::scope(|s| {
            let waiting = s.spawn(|| door.wait(key, tag, &no, Duration::from_secs(5)));
            std::thread::sleep(Duration::from_millis(30));
            let (_far, near) = pair();
            door.arrive(&hello(&key, &forged), near);
            let (_far2, near) = pair();
            door.arrive(&hello(&key, &tag), near);
            assert!(waiting.join().unwrap().is_ok());
        });
        let yes = AtomicBool::new(true);
        assert!(matches!(
            door.wait(key, tag, &yes, Duration::from_secs(5)),
            Err(DataError::Cancelled)
        ));
    }
}
