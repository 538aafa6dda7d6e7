//! The grant of a third-party transfer (`docs/third-party.md`): server A's sealed permission
//! for one other server B to read named paths for one job, so that a client C can move data
//! from A to B without handing B its token.
//!
//! A issues a grant inside C's session ([`issue`]) and checks it when B presents it
//! ([`verify`], then [`Grant::check_token`]). Both run on A, with a 32-byte key only A holds;
//! C and B only carry the grant (they can read it, not change it). No I/O here: the caller passes the key, the time (seconds
//! since the Unix epoch, from A's clock) and the job id it drew.
//!
//! The wire form is one line of ASCII, for a message or a file:
//!
//! ```text
//! sluice-grant-v1.<base64url(JSON)>.<base64url(MAC)>
//! ```
//!
//! The MAC is `blake3::keyed_hash(key, "sluice-grant-v1.<base64url(JSON)>")`: it covers the
//! version tag and the JSON exactly as sent, so nothing is parsed before it matches, and no
//! canonical JSON is needed. base64url is unpadded (RFC 4648 section 5).

use base64::Engine;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};

use crate::manifest::components;

/// The version tag a grant's wire form starts with (and its MAC covers).
pub const GRANT_VERSION: &str = "sluice-grant-v1";
/// The longest life a grant may have, from its issue to its expiry: 24 hours. [`issue`]
/// refuses a longer one (it does not clamp: the caller asked for something it cannot have and
/// should say so), and [`verify`] refuses a grant whose life is longer.
pub const MAX_LIFETIME_SECS: u64 = 24 * 60 * 60;
/// How far ahead of `now` a grant's issue time may be and the grant still verify: 5 minutes.
/// A issues and checks its own grants, so this only covers A's clock stepping back between the
/// two (an NTP correction); expiry gets no tolerance.
pub const CLOCK_TOLERANCE_SECS: u64 = 5 * 60;
/// The longest wire form accepted or issued: 64 KiB (well inside a 1 MiB message). Longer input
/// is refused before it is decoded.
pub const MAX_GRANT_BYTES: usize = 64 << 10;
/// The longest job id: 64 characters of `[0-9A-Za-z_-]`.
pub const MAX_JOB_ID_BYTES: usize = 64;

/// Context of the key that makes a grant's token tag from A's grant key (BLAKE3 `derive_key`),
/// so that the tag and the MAC never share a key.
const TOKEN_TAG_CONTEXT: &str = "sluice 2026-11 grant v1 token tag";

/// What a grant allows. Only reading exists: the grant's JSON says so, and a grant saying
/// anything else does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantAccess {
    /// Read the granted paths (A sends them to the reader).
    Read,
}

/// What A seals: one reader may read these paths for this job, until `expires_at`, within the
/// rights and root that the issuing token has when the grant is used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// The job the grant serves, chosen by the issuer; B presents it with the grant, and it
    /// resumes this job only.
    pub job: String,
    /// The reader's (B's) certificate fingerprint as C pinned it: `SHA256:` and 43 base64
    /// characters. A compares it with the fingerprint of the certificate B's TLS proved.
    pub reader: String,
    /// The granted paths, relative to the issuing token's root, as the client named them
    /// (`/`-separated normal components); a directory covers everything inside it.
    pub paths: Vec<String>,
    /// What the grant allows: reading.
    pub access: GrantAccess,
    /// The issuing token's index in A's token file (the order of its tokens, from 0): A applies
    /// that token's current rights, root and limits at each use.
    pub token: u32,
    /// Which token that index named when the grant was issued (hex of a keyed BLAKE3 of the
    /// token's digest, [`token_tag`]): a token removed from the file, or replaced on its line,
    /// voids the grant instead of handing it to the token now at that index.
    pub token_tag: String,
    /// When the grant was issued, seconds since the Unix epoch (A's clock).
    pub issued_at: u64,
    /// When it stops being valid, seconds since the Unix epoch (A's clock).
    pub expires_at: u64,
}

/// What [`issue`] is asked to seal.
#[derive(Debug, Clone, Copy)]
pub struct GrantRequest<'a> {
    /// The job id the issuer drew (e.g. 32 hex digits): 1 to [`MAX_JOB_ID_BYTES`] characters of
    /// `[0-9A-Za-z_-]`.
    pub job: &'a str,
    /// The reader's certificate fingerprint as the client pinned it (`SHA256:...`).
    pub reader: &'a str,
    /// The paths to grant, relative to the issuing token's root: at least one, each clean.
    pub paths: &'a [String],
    /// The issuing token's index in the token file.
    pub token: u32,
    /// The digest the server keeps of the issuing token (its SHA-256).
    pub token_digest: &'a [u8; 32],
    /// Now, seconds since the Unix epoch.
    pub now_secs: u64,
    /// How long the grant lives, in seconds: 1 to [`MAX_LIFETIME_SECS`].
    pub lifetime_secs: u64,
}

/// Why a grant was not issued or not accepted. Each message says what to do next; none
/// repeats the grant or the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// The text is not a grant of this version.
    #[error("not a grant: {0}; pass the grant exactly as the issuing server gave it")]
    Format(&'static str),
    /// The MAC does not match: the grant was altered, or another server (or key) issued it.
    #[error(
        "the grant's seal does not match: it was altered, or another server issued it \
         (or this server's grant key changed); ask the client for a new grant"
    )]
    BadMac,
    /// The grant's expiry has passed.
    #[error(
        "the grant expired at {expires_at} (now {now}, seconds since the Unix epoch); \
         ask the client for a new grant"
    )]
    Expired {
        /// When it expired.
        expires_at: u64,
        /// Now.
        now: u64,
    },
    /// The grant's issue time is further in the future than the clock tolerance.
    #[error(
        "the grant is issued at {issued_at}, after now ({now}) by more than {tolerance} s: \
         this server's clock went back; fix its clock or ask for a new grant",
        tolerance = CLOCK_TOLERANCE_SECS
    )]
    NotYetValid {
        /// When it says it was issued.
        issued_at: u64,
        /// Now.
        now: u64,
    },
    /// The presenter is not the reader the grant names.
    #[error(
        "the grant is for the server {granted}, not for {presented}: only that server may use \
         it; ask the client for a grant naming the right server"
    )]
    OtherReader {
        /// The reader in the grant.
        granted: String,
        /// The presenter's fingerprint.
        presented: String,
    },
    /// The grant is for another job.
    #[error(
        "the grant is for job {granted}, not job {asked}: a grant serves its own job only; \
         start the new job with a new grant"
    )]
    OtherJob {
        /// The job in the grant.
        granted: String,
        /// The job asked for.
        asked: String,
    },
    /// A requested path is not a clean relative path.
    #[error(
        "path {path:?}: {why}; name paths relative to the token's root, with no '..' and no \
         leading, doubled or trailing '/'"
    )]
    BadPath {
        /// The path as requested.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A requested path is neither a granted path nor inside a granted directory.
    #[error(
        "path {path:?} is not covered by the grant (it grants {granted}); ask the client for \
         a grant that names it"
    )]
    NotCovered {
        /// The path as requested.
        path: String,
        /// The granted paths, joined for the message.
        granted: String,
    },
    /// No path was named (to grant, or to read under a grant).
    #[error("no path named: a grant names at least one path, and a read asks for one")]
    NoPaths,
    /// The life asked for (or sealed) is zero or longer than [`MAX_LIFETIME_SECS`].
    #[error(
        "a grant's life of {secs} s is outside 1 to {max} s; choose a life within it",
        max = MAX_LIFETIME_SECS
    )]
    Lifetime {
        /// The life asked for, or sealed.
        secs: u64,
    },
    /// The job id is empty, too long or has characters outside `[0-9A-Za-z_-]`.
    #[error(
        "job id {0:?} is not 1 to 64 characters of letters, digits, '-' and '_'; \
         draw it as 32 hex digits"
    )]
    BadJobId(String),
    /// The reader is not a `SHA256:` fingerprint.
    #[error("reader {0:?} is not a fingerprint (expected SHA256: and 43 base64 characters)")]
    BadReader(String),
    /// The sealed grant would be longer than [`MAX_GRANT_BYTES`].
    #[error("the grant would be {0} bytes, over 65536: grant fewer paths, or their directory")]
    TooLarge(usize),
    /// The token that issued the grant is no longer in the token file (or its line now holds
    /// another token).
    #[error(
        "the token that issued this grant is no longer accepted by this server; the client \
         needs a valid token and a new grant"
    )]
    TokenGone,
}

/// The tag that ties a grant to the token that issued it: hex of BLAKE3 keyed with a key
/// derived from the grant key, over the token's digest. Only A can compute it, so a grant that
/// travels to B or into a file tells nobody anything about the token.
pub fn token_tag(key: &[u8; 32], token_digest: &[u8; 32]) -> String {
    let tag_key = blake3::derive_key(TOKEN_TAG_CONTEXT, key);
    blake3::keyed_hash(&tag_key, token_digest).to_hex().to_string()
}

/// Seals a grant: checks the request and returns the wire form
/// (`sluice-grant-v1.<base64url(JSON)>.<base64url(MAC)>`). The grant expires
/// `lifetime_secs` after `now_secs`.
pub fn issue(key: &[u8; 32], request: &GrantRequest<'_>) -> Result<String, GrantError> {
    check_job(request.job)?;
    check_reader(request.reader)?;
    if request.paths.is_empty() {
        return Err(GrantError::NoPaths);
    }
    for path in request.paths {
        checked(path)?;
    }
    if request.lifetime_secs == 0 || request.lifetime_secs > MAX_LIFETIME_SECS {
        return Err(GrantError::Lifetime { secs: request.lifetime_secs });
    }
    let expires_at = request
        .now_secs
        .checked_add(request.lifetime_secs)
        .ok_or(GrantError::Lifetime { secs: request.lifetime_secs })?;
    let grant = Grant {
        job: request.job.to_owned(),
        reader: request.reader.to_owned(),
        paths: request.paths.to_vec(),
        access: GrantAccess::Read,
        token: request.token,
        token_tag: token_tag(key, request.token_digest),
        issued_at: request.now_secs,
        expires_at,
    };
    let json = serde_json::to_vec(&grant).expect("a grant always serializes");
    let signed = format!("{GRANT_VERSION}.{}", URL_SAFE_NO_PAD.encode(json));
    let mac = blake3::keyed_hash(key, signed.as_bytes());
    let wire = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(mac.as_bytes()));
    if wire.len() > MAX_GRANT_BYTES {
        return Err(GrantError::TooLarge(wire.len()));
    }
    Ok(wire)
}

/// Checks a presented grant and returns it: its form, its MAC under `key`, its life at
/// `now_secs` (an issue time up to [`CLOCK_TOLERANCE_SECS`] ahead is accepted, an expiry is
/// not), that `presenter` (the fingerprint of the certificate the peer's TLS proved) is its
/// reader, that `job` is its job, and that each of `paths` is a clean relative path that is a
/// granted path or inside one. Never panics, whatever the input.
///
/// The caller then checks that the issuing token still stands ([`Grant::check_token`]) and
/// serves the read under that token's current rights, root and limits.
pub fn verify<S: AsRef<str>>(
    wire: &str,
    key: &[u8; 32],
    now_secs: u64,
    presenter: &str,
    job: &str,
    paths: &[S],
) -> Result<Grant, GrantError> {
    let grant = verify_holder(wire, key, now_secs, presenter, job)?;
    if paths.is_empty() {
        return Err(GrantError::NoPaths);
    }
    for path in paths {
        grant.covers(path.as_ref())?;
    }
    Ok(grant)
}

/// [`verify`] without the paths: the checks a server makes when a reader presents the grant
/// in its handshake, before it names what it reads. Each read's paths are then checked with
/// [`Grant::covers`].
pub fn verify_holder(
    wire: &str,
    key: &[u8; 32],
    now_secs: u64,
    presenter: &str,
    job: &str,
) -> Result<Grant, GrantError> {
    let grant = open(wire, key)?;
    let life = grant.expires_at.saturating_sub(grant.issued_at);
    if life == 0 || life > MAX_LIFETIME_SECS {
        return Err(GrantError::Lifetime { secs: life });
    }
    if grant.issued_at > now_secs.saturating_add(CLOCK_TOLERANCE_SECS) {
        return Err(GrantError::NotYetValid { issued_at: grant.issued_at, now: now_secs });
    }
    if now_secs >= grant.expires_at {
        return Err(GrantError::Expired { expires_at: grant.expires_at, now: now_secs });
    }
    if presenter != grant.reader {
        return Err(GrantError::OtherReader {
            granted: grant.reader.clone(),
            presented: presenter.to_owned(),
        });
    }
    if job != grant.job {
        return Err(GrantError::OtherJob { granted: grant.job.clone(), asked: job.to_owned() });
    }
    Ok(grant)
}

impl Grant {
    /// Whether `path` (relative to the issuing token's root) may be read under this grant: it
    /// is a clean relative path, and a granted path or inside a granted directory, compared
    /// component by component (`data/run7` covers `data/run7/a` but not `data/run70`).
    pub fn covers(&self, path: &str) -> Result<(), GrantError> {
        let asked = checked(path)?;
        let covered = self.paths.iter().any(|granted| match components(granted) {
            Ok(granted) => asked.len() >= granted.len() && asked[..granted.len()] == granted[..],
            Err(_) => false,
        });
        if covered {
            Ok(())
        } else {
            Err(GrantError::NotCovered { path: path.to_owned(), granted: self.paths.join(", ") })
        }
    }

    /// Whether the issuing token still stands: `digest` is the digest of the token now at
    /// index [`Grant::token`] in the token file, or `None` when the file has no token there. A
    /// token removed, or another token in its place, voids the grant.
    pub fn check_token(&self, key: &[u8; 32], digest: Option<&[u8; 32]>) -> Result<(), GrantError> {
        let Some(digest) = digest else {
            return Err(GrantError::TokenGone);
        };
        // Compared as BLAKE3 hashes, in constant time (the tag is A's secret-keyed output).
        let expected = blake3::Hash::from_hex(token_tag(key, digest).as_bytes());
        let presented = blake3::Hash::from_hex(self.token_tag.as_bytes());
        match (expected, presented) {
            (Ok(expected), Ok(presented)) if expected == presented => Ok(()),
            _ => Err(GrantError::TokenGone),
        }
    }
}

/// The grant in `wire`, once its form and MAC are right (its contents are not checked).
fn open(wire: &str, key: &[u8; 32]) -> Result<Grant, GrantError> {
    if wire.len() > MAX_GRANT_BYTES {
        return Err(GrantError::Format("it is longer than 65536 bytes"));
    }
    let rest = wire
        .strip_prefix(GRANT_VERSION)
        .and_then(|rest| rest.strip_prefix('.'))
        .ok_or(GrantError::Format("it does not start with sluice-grant-v1."))?;
    let (body, mac) =
        rest.split_once('.').ok_or(GrantError::Format("it has no seal after its body"))?;
    if body.is_empty() || mac.contains('.') {
        return Err(GrantError::Format("it is not three parts joined by '.'"));
    }
    // A seal that does not decode to 32 bytes is a seal that does not match.
    let mac = URL_SAFE_NO_PAD.decode(mac).map_err(|_| GrantError::BadMac)?;
    let mac: [u8; 32] = mac.try_into().map_err(|_| GrantError::BadMac)?;
    let signed = &wire[..GRANT_VERSION.len() + 1 + body.len()];
    // `blake3::Hash` compares in constant time.
    if blake3::keyed_hash(key, signed.as_bytes()) != blake3::Hash::from(mac) {
        return Err(GrantError::BadMac);
    }
    let json = URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|_| GrantError::Format("its body is not unpadded base64url"))?;
    serde_json::from_slice(&json).map_err(|_| GrantError::Format("its body is not a v1 grant"))
}

/// The components of a path to grant or read, as [`components`] checks them.
fn checked(path: &str) -> Result<Vec<&str>, GrantError> {
    components(path).map_err(|e| GrantError::BadPath { path: path.to_owned(), why: e.why })
}

fn check_job(job: &str) -> Result<(), GrantError> {
    let ok = !job.is_empty()
        && job.len() <= MAX_JOB_ID_BYTES
        && job.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok { Ok(()) } else { Err(GrantError::BadJobId(job.to_owned())) }
}

fn check_reader(reader: &str) -> Result<(), GrantError> {
    let bad = || GrantError::BadReader(reader.to_owned());
    let b64 = reader.strip_prefix("SHA256:").ok_or_else(bad)?;
    if b64.len() != 43 {
        return Err(bad());
    }
    match STANDARD_NO_PAD.decode(b64) {
        Ok(bytes) if bytes.len() == 32 => Ok(()),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];
    const READER: &str = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

    fn wire() -> String {
        let paths = vec!["data/run7".to_owned(), "notes.txt".to_owned()];
        let request = GrantRequest {
            job: "0123456789abcdef0123456789abcdef",
            reader: READER,
            paths: &paths,
            token: 2,
            token_digest: &[9; 32],
            now_secs: 1_000_000,
            lifetime_secs: 3600,
        };
        issue(&KEY, &request).unwrap()
    }

    /// A small deterministic generator (xorshift64*), so that the test is the same every run.
    struct Xorshift(u64);

    impl Xorshift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Parses `text` as a grant; only a refusal or the grant itself may come back.
    fn try_open(text: &str) -> Result<Grant, GrantError> {
        verify(text, &KEY, 1_000_010, READER, "0123456789abcdef0123456789abcdef", &["notes.txt"])
    }

    #[test]
    fn the_grant_round_trips() {
        let grant = try_open(&wire()).unwrap();
        assert_eq!(grant.paths, vec!["data/run7", "notes.txt"]);
        assert_eq!((grant.token, grant.access), (2, GrantAccess::Read));
        assert_eq!((grant.issued_at, grant.expires_at), (1_000_000, 1_003_600));
    }

    #[test]
    fn parsing_never_panics_on_truncated_altered_or_random_text() {
        let good = wire();
        // Every prefix and every suffix.
        for cut in 0..good.len() {
            assert!(try_open(&good[..cut]).is_err(), "prefix of {cut} bytes accepted");
            assert!(try_open(&good[cut + 1..]).is_err(), "suffix from {cut} accepted");
        }
        let mut rng = Xorshift(0x5eed_0027);
        let alphabet: Vec<char> =
            "ABCXYZabcxyz0189-_+/=.: \"\\{}\u{0}\u{e9}\u{1f600}".chars().collect();
        // Random alterations of the good text: replace, insert or remove a few characters.
        for _ in 0..20_000 {
            let mut chars: Vec<char> = good.chars().collect();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(chars.len());
                let c = alphabet[rng.below(alphabet.len())];
                match rng.below(3) {
                    0 => chars[at] = c,
                    1 => chars.insert(at, c),
                    _ => {
                        chars.remove(at);
                    }
                }
            }
            let altered: String = chars.into_iter().collect();
            if altered != good {
                assert!(try_open(&altered).is_err(), "{altered:?} accepted");
            }
        }
        // Random strings, some with the right prefix, and one too long.
        for _ in 0..20_000 {
            let len = rng.below(200);
            let mut text: String = (0..len).map(|_| alphabet[rng.below(alphabet.len())]).collect();
            if rng.below(2) == 0 {
                text = format!("{GRANT_VERSION}.{text}");
            }
            assert!(try_open(&text).is_err(), "{text:?} accepted");
        }
        let long = format!("{good}{}", "A".repeat(MAX_GRANT_BYTES));
        assert_eq!(try_open(&long), Err(GrantError::Format("it is longer than 65536 bytes")));
    }

    #[test]
    fn a_sealed_body_that_is_not_a_grant_is_a_format_error() {
        // Only the key's holder can make these; they must still not panic or be accepted.
        for body in ["", "not base64!", "e30", "eyJqb2IiOjF9"] {
            let signed = format!("{GRANT_VERSION}.{body}");
            let mac = blake3::keyed_hash(&KEY, signed.as_bytes());
            let text = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(mac.as_bytes()));
            assert!(matches!(try_open(&text), Err(GrantError::Format(_))), "{body:?}");
        }
    }

    #[test]
    fn job_ids_and_readers_are_checked_at_issue() {
        for job in ["", "a b", "x/y", "\u{e9}", &"a".repeat(65)] {
            assert!(check_job(job).is_err(), "{job:?} accepted");
        }
        assert!(check_job(&"f".repeat(64)).is_ok());
        for reader in ["", "SHA256:", "sha256:AAAA", &format!("{READER}A"), &READER[..49]] {
            assert!(check_reader(reader).is_err(), "{reader:?} accepted");
        }
        assert!(check_reader(READER).is_ok());
    }
}
