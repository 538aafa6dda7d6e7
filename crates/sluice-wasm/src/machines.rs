//! `sluice-session`'s transfer machines for the page: a [`Receiving`] (a download) or a
//! [`Sending`] (an upload) by id, driven as the quinn-and-files driver drives them, through
//! plain bytes (`docs/webtransport.md`, "The page and `sluice-session`'s machines").
//!
//! - The peer's messages go in as the frames they arrive in on the control stream (4 bytes of
//!   length, then JSON: [`sluice_session::messages::decode`]); a machine's own go out as frames
//!   to write there. The page never reads a message.
//! - What the driver did (a plan made, files hashed, data ended, a deadline passed) goes in as
//!   one JSON [`Event`]; what the machine asks for comes out as JSON ([`Machines::effect`]).
//! - Time is `performance.now()`, in milliseconds: the machines read no clock.
//!
//! Hashes travel as hex, as in the messages.

use std::ops::Range;

use serde::Deserialize;
use serde_json::{Value, json};
use sluice_session::manifest::{self, Entry};
use sluice_session::messages::{self, ErrorCode, ReceiverMsg, SenderMsg};
use sluice_session::time::Instant;
use sluice_session::transfer::{hex, parse_hashes};
use sluice_session::{
    Fault, Planned, Received, Receiving, RecvEffect, SendEffect, Sending, Sent, Timeouts,
};

/// Machines open at once.
pub const MACHINES_MAX: usize = 64;

/// One transfer's machine.
#[derive(Debug)]
enum Machine {
    Receiving(Receiving),
    Sending(Sending),
}

/// What a driver did, for [`Machines::event`]: JSON as serde writes this enum (`"timeout"`,
/// `{"data_ended": {"phase": 0}}`, ...).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// The receiver's plan of a manifest ([`Receiving::handle_planned`]).
    Planned {
        /// The manifest's files that move, increasing.
        files: Vec<u32>,
        /// Existing files that will be replaced.
        #[serde(default)]
        replaced: u64,
        /// Existing files kept by the overwrite policy.
        #[serde(default)]
        kept: u64,
        /// Partial files kept from an interrupted transfer: (index among the wanted files,
        /// hex BLAKE3 of each block of its leading bytes).
        #[serde(default)]
        offers: Vec<(u32, Vec<String>)>,
        /// Say what would move, and stop.
        #[serde(default)]
        dry_run: bool,
    },
    /// This end's data streams for `phase` are ready (`handle_bound`; a page has no ports).
    Bound {
        /// The phase.
        phase: u32,
        /// Ports, where there are any.
        #[serde(default)]
        ports: Vec<u16>,
    },
    /// Every byte of `phase` is in: the hashes of the files ending in it
    /// ([`Receiving::handle_received`]).
    Received {
        /// The phase.
        phase: u32,
        /// Hex BLAKE3 of each file that ends in the phase.
        hashes: Vec<String>,
    },
    /// The data of `phase` ended (`handle_data_ended`).
    DataEnded {
        /// The phase.
        phase: u32,
    },
    /// Every wanted file hashed whole ([`Sending::handle_hashed`]).
    Hashed {
        /// Hex BLAKE3 of each wanted file.
        hashes: Vec<String>,
    },
    /// The blocks of the files a `hash_blocks` effect named (`handle_blocks_hashed`).
    BlocksHashed {
        /// Per file, hex BLAKE3 of each block.
        hashed: Vec<Vec<String>>,
    },
    /// The leading bytes of each offered file that match ([`Sending::handle_resume_checked`]).
    ResumeChecked {
        /// Bytes per offered file.
        kept: Vec<u64>,
    },
    /// The files are stored, or why not ([`Receiving::handle_committed`]).
    Committed {
        /// The failure's class, if it failed.
        #[serde(default)]
        code: Option<ErrorCode>,
        /// Its words.
        #[serde(default)]
        message: String,
    },
    /// This end failed (`handle_failure`).
    Failure {
        /// The failure's class.
        code: ErrorCode,
        /// Its words.
        message: String,
    },
    /// The peer finished its side of the control stream (`handle_peer_finished`).
    PeerFinished,
    /// The machine's deadline passed (`handle_timeout`).
    Timeout,
}

/// What a machine asks for next ([`Machines::effect`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A frame to write on the control stream.
    Frame(Vec<u8>),
    /// Anything else, as JSON.
    Json(Value),
}

/// The open machines, by id (from 1), and the last refusal's reason.
#[derive(Debug, Default)]
pub struct Machines {
    slots: Vec<Option<Machine>>,
    error: String,
    /// Where `now` 0 is, off the browser (the host's tests).
    #[cfg(not(target_arch = "wasm32"))]
    origin: Option<std::time::Instant>,
}

impl Machines {
    /// None open.
    pub const fn new() -> Machines {
        Machines {
            slots: Vec::new(),
            error: String::new(),
            #[cfg(not(target_arch = "wasm32"))]
            origin: None,
        }
    }

    /// A [`Receiving`] (this end downloads) begun at `now_ms`: its id, or 0 when
    /// [`MACHINES_MAX`] are open. `early`: the sender was asked to start the data right
    /// behind its manifest ([`Receiving::new_early`]: a page that holds nothing of the file
    /// saves the round trip of its `Want`; it has no sockets to lose, so it can take it).
    pub fn receive(&mut self, now_ms: f64, early: bool) -> u32 {
        let now = self.at(now_ms);
        let machine = match early {
            true => Receiving::new_early(now, Timeouts::default(), true),
            false => Receiving::new(now, Timeouts::default()),
        };
        self.seat(Machine::Receiving(machine))
    }

    /// A [`Sending`] (this end uploads) of `manifest` (a JSON array of entries, checked as a
    /// peer's manifest is: [`manifest::check`]) begun at `now_ms`: its id, or 0 when refused
    /// ([`Machines::error`] says why).
    pub fn send(&mut self, now_ms: f64, manifest: &[u8]) -> u32 {
        let entries = match serde_json::from_slice::<Vec<Entry>>(manifest) {
            Ok(entries) => entries,
            Err(e) => {
                self.refuse(format!("the manifest is not a list of entries: {e}"));
                return 0;
            }
        };
        if let Err(e) = manifest::check(&entries) {
            self.refuse(e.to_string());
            return 0;
        }
        let now = self.at(now_ms);
        self.seat(Machine::Sending(Sending::new(now, &entries, Timeouts::default())))
    }

    /// Hands machine `id` the peer's message `frame`. A frame that is not a message of the
    /// peer's role is the peer breaking the protocol: the machine fails, and says so to it.
    /// False for an unknown id.
    pub fn message(&mut self, id: u32, now_ms: f64, frame: &[u8]) -> bool {
        let now = self.at(now_ms);
        let Some(machine) = self.machine(id) else { return false };
        let broken = |e: messages::CodecError| format!("the peer's message: {e}");
        match machine {
            Machine::Receiving(m) => match messages::decode::<SenderMsg>(frame) {
                Ok(msg) => m.handle_message(now, msg),
                Err(e) => m.handle_failure(ErrorCode::Protocol, broken(e)),
            },
            Machine::Sending(m) => match messages::decode::<ReceiverMsg>(frame) {
                Ok(msg) => m.handle_message(now, msg),
                Err(e) => m.handle_failure(ErrorCode::Protocol, broken(e)),
            },
        }
        true
    }

    /// Hands machine `id` what its driver did (`event`: JSON of an [`Event`]). False, with
    /// [`Machines::error`] saying why, for an unknown id, an event that is not JSON of one,
    /// or one the machine's role has no use for.
    pub fn event(&mut self, id: u32, now_ms: f64, event: &[u8]) -> bool {
        let applied = match serde_json::from_slice::<Event>(event) {
            Err(e) => Err(format!("not an event: {e}")),
            Ok(event) => {
                let now = self.at(now_ms);
                match self.machine(id) {
                    Some(machine) => apply(machine, now, event),
                    None => Err(format!("no machine {id}")),
                }
            }
        };
        applied.map_err(|why| self.refuse(why)).is_ok()
    }

    /// What machine `id` asks for next, if anything.
    pub fn effect(&mut self, id: u32) -> Option<Output> {
        match self.machine(id)? {
            Machine::Receiving(m) => m.poll_effect().map(recv_effect),
            Machine::Sending(m) => m.poll_effect().map(send_effect),
        }
    }

    /// When machine `id` wants [`Event::Timeout`], in the page's milliseconds.
    pub fn deadline_ms(&mut self, id: u32) -> Option<f64> {
        let at = match self.machine(id)? {
            Machine::Receiving(m) => m.poll_timeout(),
            Machine::Sending(m) => m.poll_timeout(),
        }?;
        Some(self.ms(at))
    }

    /// Ends machine `id` (nothing for an unknown one).
    pub fn end(&mut self, id: u32) {
        crate::free(&mut self.slots, id);
    }

    /// Why the last call was refused.
    pub fn error(&self) -> &str {
        &self.error
    }

    fn machine(&mut self, id: u32) -> Option<&mut Machine> {
        crate::slot(&mut self.slots, id)
    }

    fn seat(&mut self, machine: Machine) -> u32 {
        let id = crate::seat(&mut self.slots, MACHINES_MAX, machine);
        if id == 0 {
            self.refuse(format!("{MACHINES_MAX} transfers are open already"));
        }
        id
    }

    /// Records why a call was refused.
    fn refuse(&mut self, why: String) {
        self.error = why;
    }

    #[cfg(target_arch = "wasm32")]
    fn at(&mut self, now_ms: f64) -> Instant {
        sluice_session::time::Moment::from_millis(now_ms)
    }

    #[cfg(target_arch = "wasm32")]
    fn ms(&self, at: Instant) -> f64 {
        at.since_origin().as_secs_f64() * 1e3
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn at(&mut self, now_ms: f64) -> Instant {
        let origin = *self.origin.get_or_insert_with(std::time::Instant::now);
        let since = std::time::Duration::try_from_secs_f64(now_ms / 1e3).unwrap_or_default();
        origin.checked_add(since).unwrap_or(origin)
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn ms(&self, at: Instant) -> f64 {
        let origin = self.origin.unwrap_or(at);
        at.saturating_duration_since(origin).as_secs_f64() * 1e3
    }
}

/// Hands `event` to `machine`, or says why it has no use for it.
fn apply(machine: &mut Machine, now: Instant, event: Event) -> Result<(), String> {
    // The same call on either role's machine (the two share the names, not a trait).
    macro_rules! either {
        ($machine:expr, $m:ident => $call:expr) => {
            match $machine {
                Machine::Receiving($m) => $call,
                Machine::Sending($m) => $call,
            }
        };
    }
    let hashes = |hexes: &[String]| parse_hashes(hexes, "the driver's event");
    match (machine, event) {
        (Machine::Receiving(m), Event::Planned { files, replaced, kept, offers, dry_run }) => {
            let offers = offers
                .into_iter()
                .map(|(k, blocks)| Ok((k, hashes(&blocks)?)))
                .collect::<Result<_, String>>()?;
            m.handle_planned(now, Planned { files, replaced, kept, offers, dry_run });
        }
        (Machine::Receiving(m), Event::Received { phase, hashes: h }) => {
            m.handle_received(now, phase, hashes(&h)?);
        }
        (Machine::Receiving(m), Event::Committed { code, message }) => {
            m.handle_committed(code.map_or(Ok(()), |code| Err((code, message))));
        }
        (Machine::Sending(m), Event::Hashed { hashes: h }) => m.handle_hashed(now, hashes(&h)?),
        (Machine::Sending(m), Event::ResumeChecked { kept }) => m.handle_resume_checked(now, kept),
        (machine, Event::BlocksHashed { hashed }) => {
            let h: Vec<_> = hashed.iter().map(|h| hashes(h)).collect::<Result<_, _>>()?;
            either!(machine, m => m.handle_blocks_hashed(now, h));
        }
        (machine, Event::Bound { phase, ports }) => {
            either!(machine, m => m.handle_bound(now, phase, ports));
        }
        (machine, Event::DataEnded { phase }) => {
            either!(machine, m => m.handle_data_ended(now, phase))
        }
        (machine, Event::Failure { code, message }) => {
            either!(machine, m => m.handle_failure(code, message));
        }
        (machine, Event::PeerFinished) => either!(machine, m => m.handle_peer_finished(now)),
        (machine, Event::Timeout) => either!(machine, m => m.handle_timeout(now)),
        (Machine::Receiving(_), event) => {
            return Err(format!("a receiving end has no use for {event:?}"));
        }
        (Machine::Sending(_), event) => {
            return Err(format!("a sending end has no use for {event:?}"));
        }
    }
    Ok(())
}

fn range(r: &Range<u64>) -> [u64; 2] {
    [r.start, r.end]
}

fn ranges(rs: &[Range<u64>]) -> Vec<[u64; 2]> {
    rs.iter().map(range).collect()
}

fn fault(f: &Fault) -> Value {
    match f {
        Fault::Peer { code, message } => json!({ "peer": { "code": code, "message": message } }),
        Fault::Protocol(message) => json!({ "protocol": message }),
        Fault::Timeout(message) => json!({ "timeout": message }),
        Fault::Local { code, message } => json!({ "local": { "code": code, "message": message } }),
    }
}

fn recv_effect(effect: RecvEffect) -> Output {
    Output::Json(match effect {
        RecvEffect::Send(msg) => return frame(&msg),
        RecvEffect::Plan(entries) => json!({ "plan": entries }),
        RecvEffect::Bind { phase } => json!({ "bind": { "phase": phase } }),
        RecvEffect::StartData { phase, peer_ports, span, present, ends } => json!({
            "start_data": {
                "phase": phase,
                "peer_ports": peer_ports,
                "span": range(&span),
                "present": ranges(&present),
                "ends": ends,
            }
        }),
        RecvEffect::StopData => json!("stop_data"),
        RecvEffect::DropEarly => json!("drop_early"),
        RecvEffect::HashBlocks(files) => json!({ "hash_blocks": files }),
        RecvEffect::Commit { expected, actual } => {
            json!({ "commit": { "expected": hex(&expected), "actual": hex(&actual) } })
        }
        RecvEffect::Done(Ok(Received { digests, repaired, resumed, dry_run, path_memory })) => {
            json!({ "done": { "ok": {
                "digests": hex(&digests),
                "repaired": repaired,
                "resumed": resumed,
                "dry_run": dry_run,
                "path_memory": path_memory,
            } } })
        }
        RecvEffect::Done(Err(f)) => json!({ "done": { "error": fault(&f) } }),
    })
}

fn send_effect(effect: SendEffect) -> Output {
    Output::Json(match effect {
        SendEffect::Send(msg) => return frame(&msg),
        SendEffect::Wanted { files, replaced, kept, dry_run } => json!({
            "wanted": { "files": files, "replaced": replaced, "kept": kept, "dry_run": dry_run }
        }),
        SendEffect::CheckResume(offers) => {
            let offers: Vec<Value> =
                offers.iter().map(|(k, blocks)| json!([k, hex(blocks)])).collect();
            json!({ "check_resume": offers })
        }
        SendEffect::Bind { phase } => json!({ "bind": { "phase": phase } }),
        SendEffect::StartData { phase, peer_ports, ranges: r } => json!({
            "start_data": { "phase": phase, "peer_ports": peer_ports, "ranges": ranges(&r) }
        }),
        SendEffect::HashFiles => json!("hash_files"),
        SendEffect::StopData => json!("stop_data"),
        SendEffect::StopHashing => json!("stop_hashing"),
        SendEffect::HashBlocks(files) => json!({ "hash_blocks": files }),
        SendEffect::Early { files } => json!({ "early": { "files": files } }),
        SendEffect::CancelData => json!("cancel_data"),
        SendEffect::Done(Ok(Sent { digests, repaired, moved, dry_run })) => json!({
            "done": { "ok": {
                "digests": hex(&digests), "repaired": repaired, "moved": moved, "dry_run": dry_run
            } }
        }),
        SendEffect::Done(Err(f)) => json!({ "done": { "error": fault(&f) } }),
    })
}

/// A machine's message as the frame it goes in; a message over the frame's limit (a
/// machine's own never is: it cuts its manifest in parts) as the failure that says so.
fn frame<T: serde::Serialize>(msg: &T) -> Output {
    match messages::encode(msg) {
        Ok(frame) => Output::Frame(frame),
        Err(e) => Output::Frame(messages::failed_frame(ErrorCode::Protocol, &e.to_string())),
    }
}
