//! The session's handshake, by end: the server admits a client's `Hello` ([`ServerHandshake`]) and
//! the client reads the server's `Offer` and answer ([`early_start`], [`welcome`]). No I/O: the
//! server's driver checks the token against its token file ([`ServerHandshake::handle_token`]) and
//! draws the session's id; the machine decides the order of the checks, the answer, and what
//! the session agreed on.
//!
//! ```text
//!  client                                        server
//!    <----------- Offer {session_id, max_channels, udp_ports}   (before the token is known)
//!    Hello {version, token, spec} ----------->   token, then version, then spec
//!    <----------- Welcome {session_id, spec} | Refused {code, message}
//! ```

use std::collections::VecDeque;
use std::time::Duration;

use crate::messages::{Answer, ErrorCode, GrantClaim, Offer, Request, Spec};
use crate::negotiate::Negotiated;
use crate::time::Instant;
use crate::transfer::{Deadline, Fault};

/// What the server's driver does next ([`ServerHandshake::poll_effect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeEffect {
    /// Check this token, and answer [`ServerHandshake::handle_token`].
    CheckToken(String),
    /// Check this grant of the server's own, presented for its job by the peer whose TLS
    /// certificate the driver knows, and answer [`ServerHandshake::handle_token`].
    CheckGrant(GrantClaim),
    /// Answer the client (its `Welcome`): the session is open and agreed on `negotiated`.
    Open {
        /// The answer to send.
        welcome: Answer,
        /// What the session's transfers use.
        negotiated: Negotiated,
    },
    /// Refuse the session: send `Refused` with these (when the stream still takes it) and
    /// close the connection; `code` picks the close code.
    Refuse {
        /// The class of the refusal.
        code: ErrorCode,
        /// For the client.
        message: String,
    },
}

/// What the token check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenVerdict {
    /// The token is accepted; its transfers' rate is capped at this many bits per second.
    Accepted {
        /// The token's rate cap, if any.
        rate_cap: Option<u64>,
    },
    /// The token is not accepted, for this reason (said to the client).
    Refused(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitHello,
    CheckingToken,
    Done,
}

/// The server's side of the handshake: the first message must be `Hello`, with a token the
/// driver accepts, this end's protocol version and a specification it can serve; the answer is
/// `Welcome` with the chosen specification, or a refusal naming the first check that failed
/// (the token first, so a peer without one learns nothing else).
///
/// To drive it: make it when the connection is accepted ([`ServerHandshake::new`]), hand it the first
/// message of the handshake stream (or its failure, or the deadline of
/// [`ServerHandshake::poll_timeout`]), do what [`ServerHandshake::poll_effect`] asks, and hand the token
/// check's verdict back. It ends with [`HandshakeEffect::Open`] or [`HandshakeEffect::Refuse`].
#[derive(Debug)]
pub struct ServerHandshake {
    version: u32,
    session_id: String,
    max_channels: u32,
    state: State,
    /// The Hello being checked.
    hello: Option<(u32, Spec)>,
    deadline: Deadline,
    effects: VecDeque<HandshakeEffect>,
}

impl ServerHandshake {
    /// A connection just accepted by a server speaking `version`, serving at most
    /// `max_channels` per transfer; the session's id (drawn by the driver) is `session_id`;
    /// `Hello` must come within `wait`.
    pub fn new(
        now: Instant,
        version: u32,
        session_id: String,
        max_channels: u32,
        wait: Duration,
    ) -> ServerHandshake {
        let mut deadline = Deadline::default();
        deadline.set(now, "Hello", wait);
        ServerHandshake {
            version,
            session_id,
            max_channels,
            state: State::AwaitHello,
            hello: None,
            deadline,
            effects: VecDeque::new(),
        }
    }

    /// The next thing to do.
    pub fn poll_effect(&mut self) -> Option<HandshakeEffect> {
        self.effects.pop_front()
    }

    /// When [`ServerHandshake::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline.at()
    }

    /// The first message of the handshake stream.
    pub fn handle_message(&mut self, now: Instant, msg: Request) {
        let _ = now;
        if self.state != State::AwaitHello {
            return;
        }
        match msg {
            Request::Hello { version, token, spec, grant } => {
                self.hello = Some((version, spec));
                self.state = State::CheckingToken;
                self.deadline.clear();
                self.effects.push_back(match grant {
                    Some(claim) => HandshakeEffect::CheckGrant(claim),
                    None => HandshakeEffect::CheckToken(token),
                });
            }
            _ => self.refuse(ErrorCode::Auth, "the first message must be Hello with a token"),
        }
    }

    /// The handshake stream failed or held no message (`why`, for the client when it can
    /// still read).
    pub fn handle_bad_message(&mut self, why: String) {
        if self.state == State::AwaitHello {
            self.refuse(ErrorCode::Protocol, &format!("bad handshake: {why}"));
        }
    }

    /// The driver's verdict on the token of `Hello`.
    pub fn handle_token(&mut self, verdict: TokenVerdict) {
        if self.state != State::CheckingToken {
            return;
        }
        let Some((version, spec)) = self.hello.take() else { return };
        let rate_cap = match verdict {
            TokenVerdict::Accepted { rate_cap } => rate_cap,
            TokenVerdict::Refused(why) => return self.refuse(ErrorCode::Auth, &why),
        };
        if version != self.version {
            let why = format!("protocol version {version} is not spoken here ({})", self.version);
            return self.refuse(ErrorCode::Protocol, &why);
        }
        match Negotiated::from_spec(&spec) {
            Ok(proposed) => {
                let negotiated = proposed.choose(self.max_channels, rate_cap);
                let welcome = Answer::Welcome {
                    session_id: self.session_id.clone(),
                    spec: negotiated.to_spec(),
                };
                self.state = State::Done;
                self.effects.push_back(HandshakeEffect::Open { welcome, negotiated });
            }
            Err(why) => self.refuse(ErrorCode::Protocol, &why),
        }
    }

    /// The deadline passed: no `Hello` came.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.passed(now).is_some() {
            self.refuse(ErrorCode::Auth, "no Hello within the deadline");
        }
    }

    fn refuse(&mut self, code: ErrorCode, message: &str) {
        if self.state == State::Done {
            return;
        }
        self.state = State::Done;
        self.deadline.clear();
        self.effects.push_back(HandshakeEffect::Refuse { code, message: message.to_owned() });
    }
}

/// What a client's `Welcome` settled: the session's id (32 hex digits, checked) and the
/// specification chosen within what the client proposed (`proposal`, offering `offered`
/// channels). A refusal or a failure is the server's words as a [`Fault::Peer`]; anything else
/// a [`Fault::Protocol`].
pub fn welcome(answer: Answer, proposal: &Spec) -> Result<(String, Negotiated), Fault> {
    match answer {
        Answer::Welcome { session_id, spec } => {
            if !is_session_id(&session_id) {
                return Err(Fault::Protocol(format!("bad session id {session_id:?} in Welcome")));
            }
            let negotiated = Negotiated::from_spec(&spec)
                .map_err(|e| Fault::Protocol(format!("the server chose {spec:?}: {e}")))?;
            if negotiated.channels > proposal.max_channels {
                return Err(Fault::Protocol(format!(
                    "the server chose {} channels, more than the {} offered",
                    negotiated.channels, proposal.max_channels
                )));
            }
            Ok((session_id, negotiated))
        }
        Answer::Refused { code, message } | Answer::Failed { code, message } => {
            Err(Fault::Peer { code, message })
        }
        other => Err(Fault::Protocol(format!("unexpected answer {other:?}"))),
    }
}

/// What a client may start early on a server's `Offer`: the session's id, the specification
/// the server's `Welcome` will choose from `proposal` (the smaller channel count, the rest as
/// proposed: a server offers sockets only when no token caps its rate), and the ports to send
/// to, one per channel. `Ok(None)` when the offer has no sockets.
#[allow(clippy::type_complexity)] // the three parts of one answer
pub fn early_start(
    offer: &Offer,
    proposal: &Spec,
) -> Result<Option<(String, Negotiated, Vec<u16>)>, Fault> {
    if offer.udp_ports.is_empty() {
        return Ok(None);
    }
    let bad = |why: String| Fault::Protocol(format!("the server's offer: {why}"));
    if !is_session_id(&offer.session_id) {
        return Err(bad(format!("bad session id {:?}", offer.session_id)));
    }
    let negotiated = Negotiated::from_spec(proposal).map_err(bad)?.choose(offer.max_channels, None);
    let n = negotiated.channels as usize;
    if offer.udp_ports.len() < n {
        return Err(bad(format!("{} ports for {n} channels", offer.udp_ports.len())));
    }
    Ok(Some((offer.session_id.clone(), negotiated, offer.udp_ports[..n].to_vec())))
}

fn is_session_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The bounds on connections whose token is not yet checked ([`admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Places per address.
    pub per_address: usize,
    /// Places in all.
    pub all: usize,
    /// Beyond this many places held in all, a newcomer first proves its address (a Retry).
    pub retry_above: usize,
    /// Connections that may wait for a place, per address and in all.
    pub waiting_per_address: usize,
    /// See `waiting_per_address`.
    pub waiting_all: usize,
    /// An address none of whose places turned over for this long has stalled.
    pub place_wait: Duration,
}

/// What the server holds now, as [`admit`] weighs a newcomer from one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AdmissionCounts {
    /// Places held, in all and by the newcomer's address.
    pub held_all: usize,
    /// See `held_all`.
    pub held_here: usize,
    /// Connections waiting for a place, in all and from the newcomer's address.
    pub waiting_all: usize,
    /// See `waiting_all`.
    pub waiting_here: usize,
    /// Since a place of the newcomer's address was last taken or given back.
    pub since_turnover: Duration,
}

/// What becomes of a new connection ([`admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmitDecision {
    /// Set it up, in a place of its address.
    Place,
    /// Ask it to prove its address first (a stateless QUIC Retry).
    Retry,
    /// Let it wait for a place of its address.
    Wait,
    /// Turn it away, for this reason (for the log).
    Refuse(&'static str),
}

/// The server's admission of a new connection (`validated`: it proved its address with a
/// Retry): a place while its address has one free and the server is below its bound; past
/// `retry_above` in all, or with its address's places taken, a Retry first; then a wait for a
/// place while its address's places turn over and the waiting are within bounds; else refused.
/// A connection beyond its address's places is never set up at once: one host's burst waits
/// its turn instead of taking every place.
pub fn admit(limits: &AdmissionLimits, now: &AdmissionCounts, validated: bool) -> AdmitDecision {
    let full_here = now.held_here >= limits.per_address;
    if !validated && (now.held_all >= limits.retry_above || full_here) {
        AdmitDecision::Retry
    } else if !full_here && now.held_all < limits.all {
        AdmitDecision::Place
    } else if !full_here {
        AdmitDecision::Refuse("as many connections are being set up as the server allows")
    } else if now.since_turnover >= limits.place_wait {
        AdmitDecision::Refuse("this address's connections being set up have stalled")
    } else if now.waiting_here >= limits.waiting_per_address
        || now.waiting_all >= limits.waiting_all
    {
        AdmitDecision::Refuse("as many connections wait to be set up as the server allows")
    } else {
        AdmitDecision::Wait
    }
}
