//! Logins of the web app: a token, checked by the server's own [`Gate`], becomes a session held
//! here (a random id in a `Secure; HttpOnly; SameSite=Strict` cookie, never the token itself),
//! with a CSRF token of its own that every state-changing request must carry in a header.
//!
//! Bounds: [`SESSIONS_MAX`] sessions, each for [`SESSION_TTL`] from its login; login attempts
//! by a [`Bucket`] per source address and one for all (a burst, then one per interval).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice::session::{Access, Gate};

/// Sessions held at once; a login beyond them (none expired) is refused as busy.
pub(crate) const SESSIONS_MAX: usize = 1024;
/// How long a session lasts from its login.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Source addresses whose login attempts are counted at once; past it, the oldest full
/// bucket is forgotten (a full bucket is the same as none).
const ADDRESSES_MAX: usize = 4096;
/// The cookie's name.
pub(crate) const COOKIE: &str = "sluice_session";
/// How long a WebTransport ticket may wait to be used (a page asks for one just before it
/// connects).
pub(crate) const TICKET_TTL: Duration = Duration::from_secs(60);
/// Tickets held at once; past it the oldest is forgotten.
const TICKETS_MAX: usize = 4096;

/// A token bucket of login attempts: `burst` at once, then one more per `every`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rate {
    /// Attempts allowed in a burst.
    pub(crate) burst: u32,
    /// Time for one attempt to come back.
    pub(crate) every: Duration,
}

/// How fast logins may be tried.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoginLimits {
    /// From one source address.
    pub(crate) per_address: Rate,
    /// From all addresses together.
    pub(crate) all: Rate,
}

impl LoginLimits {
    /// 10 attempts, then one every 6 s per address; 100, then 5 a second in all.
    pub(crate) const DEFAULT: LoginLimits = LoginLimits {
        per_address: Rate { burst: 10, every: Duration::from_secs(6) },
        all: Rate { burst: 100, every: Duration::from_millis(200) },
    };
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: Rate, now: Instant) -> Bucket {
        Bucket { tokens: f64::from(rate.burst), at: now }
    }

    /// Takes one attempt if there is one.
    fn take(&mut self, rate: Rate, now: Instant) -> bool {
        let refill =
            now.saturating_duration_since(self.at).as_secs_f64() / rate.every.as_secs_f64();
        self.tokens = (self.tokens + refill).min(f64::from(rate.burst));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One logged-in browser.
#[derive(Debug)]
pub(crate) struct Session {
    /// What its token may do.
    pub(crate) access: Arc<Access>,
    /// The token state-changing requests carry in `X-Sluice-CSRF`.
    pub(crate) csrf: String,
    /// Its sessions to servers, when the app offers other servers in its panes (it keeps the
    /// login's token for this server's own session; [`super::servers`]).
    pub(crate) linked: Option<Arc<super::servers::Linked>>,
    expires: Instant,
}

/// Why a login failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LoginError {
    /// Too many attempts: from this address, or from all.
    RateLimited,
    /// The token is not one of the server's.
    Refused,
    /// [`SESSIONS_MAX`] sessions are live.
    Full,
}

/// The server's web logins.
#[derive(Debug)]
pub(crate) struct Logins {
    gate: Gate,
    limits: LoginLimits,
    /// Whether a session keeps its token ([`Logins::keep_tokens`]).
    keep_tokens: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    sessions: HashMap<String, Arc<Session>>,
    by_address: HashMap<IpAddr, Bucket>,
    all: Bucket,
    /// WebTransport tickets: the session id each was given to, and until when it may be used.
    tickets: HashMap<String, (String, Instant)>,
}

/// 32 random bytes, hex.
fn random_id() -> String {
    let mut bytes = [0u8; 32];
    // Without randomness there can be no session: better to stop than to hand out guessable ids.
    aws_lc_rs::rand::fill(&mut bytes).expect("the system's random source failed");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Logins {
    /// Logins checked by `gate`, limited by `limits`.
    pub(crate) fn new(gate: Gate, limits: LoginLimits) -> Logins {
        let state = State {
            sessions: HashMap::new(),
            by_address: HashMap::new(),
            all: Bucket::full(limits.all, Instant::now()),
            tickets: HashMap::new(),
        };
        Logins { gate, limits, keep_tokens: false.into(), state: Mutex::new(state) }
    }

    /// Sessions from now on keep their tokens in memory, for the server's own session on
    /// their behalf (other servers in the page's panes).
    pub(crate) fn keep_tokens(&self) {
        self.keep_tokens.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Logs in with `token` from `from`: the new session's id and the session.
    pub(crate) fn login(
        &self,
        token: &str,
        from: IpAddr,
    ) -> Result<(String, Arc<Session>), LoginError> {
        let now = Instant::now();
        {
            let mut state = self.state();
            let limits = self.limits;
            if !state.by_address.contains_key(&from) && state.by_address.len() >= ADDRESSES_MAX {
                // Forget an address whose bucket has refilled; else the oldest.
                let forget = state.by_address.iter().min_by_key(|(_, b)| b.at).map(|(ip, _)| *ip);
                if let Some(ip) = forget {
                    state.by_address.remove(&ip);
                }
            }
            let mine = state
                .by_address
                .entry(from)
                .or_insert_with(|| Bucket::full(limits.per_address, now))
                .take(limits.per_address, now);
            if !mine || !state.all.take(limits.all, now) {
                return Err(LoginError::RateLimited);
            }
        }
        let access = self.gate.admit(token).ok_or(LoginError::Refused)?;
        let mut state = self.state();
        state.sessions.retain(|_, s| s.expires > now);
        if state.sessions.len() >= SESSIONS_MAX {
            return Err(LoginError::Full);
        }
        let linked = self
            .keep_tokens
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| Arc::new(super::servers::Linked::new(token)));
        let session =
            Arc::new(Session { access, csrf: random_id(), linked, expires: now + SESSION_TTL });
        let id = random_id();
        state.sessions.insert(id.clone(), session.clone());
        Ok((id, session))
    }

    /// The live session of the cookie's `id`.
    pub(crate) fn session(&self, id: &str) -> Option<Arc<Session>> {
        let mut state = self.state();
        let session = state.sessions.get(id)?.clone();
        if session.expires <= Instant::now() {
            state.sessions.remove(id);
            return None;
        }
        Some(session)
    }

    /// Ends the session of `id`.
    pub(crate) fn logout(&self, id: &str) {
        self.state().sessions.remove(id);
    }

    /// A one-time ticket for a WebTransport session of the session `id` (a browser sends no
    /// cookie with WebTransport: the page asks for a ticket over HTTPS, with its cookie and
    /// CSRF token, and presents it when it connects). It lasts [`TICKET_TTL`].
    pub(crate) fn ticket(&self, id: &str) -> String {
        let now = Instant::now();
        let mut state = self.state();
        state.tickets.retain(|_, (_, until)| *until > now);
        if state.tickets.len() >= TICKETS_MAX {
            let oldest = state.tickets.iter().min_by_key(|(_, (_, u))| *u).map(|(t, _)| t.clone());
            if let Some(oldest) = oldest {
                state.tickets.remove(&oldest);
            }
        }
        let ticket = random_id();
        state.tickets.insert(ticket.clone(), (id.to_owned(), now + TICKET_TTL));
        ticket
    }

    /// Uses up `ticket`: the id of the session it was given to, while both are live. Every
    /// request on the WebTransport session then looks that session up again ([`Logins::session`]),
    /// so a logout or expiry ends it as it ends the cookie's.
    pub(crate) fn redeem(&self, ticket: &str) -> Option<String> {
        let (id, until) = self.state().tickets.remove(ticket)?;
        if until <= Instant::now() {
            return None;
        }
        self.session(&id).map(|_| id)
    }
}

/// Whether `presented` is the session's CSRF token (compared in constant time).
pub(crate) fn csrf_matches(session: &Session, presented: &str) -> bool {
    aws_lc_rs::constant_time::verify_slices_are_equal(session.csrf.as_bytes(), presented.as_bytes())
        .is_ok()
}
