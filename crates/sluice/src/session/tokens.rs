//! The tokens a server accepts, and what each may do: one token per line of an owner-only file,
//! then optional `key=value` words that narrow it. Blank lines and `#` comments are ignored.
//!
//! ```text
//! # token                            what it may do (all optional)
//! 3f9c0a...e1                        # everything under the served directory
//! 77b2d4...0c  rights=read,list root=projects/run7 transfers=2 rate=200Mbit
//! a1c9e0...5f  rights=write root=incoming
//! ```
//!
//! - `rights`: any of `read` (download), `write` (upload), `list` (`ls`, `stat`) and `relay`
//!   (deposit sealed blocks in a relay's spool, `docs/relay.md`), joined by commas; all four when
//!   absent.
//! - `root`: a directory under the served directory, relative to it, that the token sees as its
//!   whole world; the served directory itself when absent.
//! - `transfers`: how many transfers the token may run at once, over all its sessions.
//! - `rate`: the most each of its transfers may send, with a unit (`200Mbit`, `25MB`).
//! - `spool`: on a relay, the most bytes its blocks may hold in the spool at once (`20GB`).
//!
//! Only the SHA-256 of each token is kept. A presented token is hashed too and compared with
//! every accepted digest by `aws_lc_rs::constant_time::verify_slices_are_equal`, without stopping
//! at a match: neither the time taken nor the comparison reveals how much of a token was right,
//! its length, or which line matched. Errors name a line by its number, never by its token.

use std::fmt;
use std::path::Path;

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::digest::{SHA256, digest};

use super::SessionError;
use super::identity::check_private;

/// What a token may do with the files it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rights {
    /// Download.
    pub read: bool,
    /// Upload.
    pub write: bool,
    /// List directories and stat paths.
    pub list: bool,
    /// Deposit sealed blocks in a relay's spool (`serve --spool`).
    pub relay: bool,
}

impl Rights {
    /// Every right.
    pub const ALL: Rights = Rights { read: true, write: true, list: true, relay: true };

    fn parse(text: &str) -> Result<Rights, String> {
        let mut rights = Rights { read: false, write: false, list: false, relay: false };
        for word in text.split(',') {
            match word {
                "read" => rights.read = true,
                "write" => rights.write = true,
                "list" => rights.list = true,
                "relay" => rights.relay = true,
                other => {
                    return Err(format!("unknown right {other:?} (use read, write, list, relay)"));
                }
            }
        }
        Ok(rights)
    }
}

/// What one line of the token file grants its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// What the token may do.
    pub rights: Rights,
    /// The directory under the served one that the token sees (relative, `/`-separated).
    pub root: Option<String>,
    /// Transfers the token may run at once.
    pub transfers: Option<u32>,
    /// The most each transfer may send, in bits per second.
    pub rate_bps: Option<u64>,
    /// The most bytes its blocks may take in a relay's spool.
    pub spool_bytes: Option<u64>,
}

impl Default for Grant {
    fn default() -> Grant {
        Grant {
            rights: Rights::ALL,
            root: None,
            transfers: None,
            rate_bps: None,
            spool_bytes: None,
        }
    }
}

impl Grant {
    /// The grant of the words after a token.
    fn parse<'a>(words: impl Iterator<Item = &'a str>) -> Result<Grant, String> {
        let mut grant = Grant::default();
        for word in words {
            let (key, value) =
                word.split_once('=').ok_or_else(|| format!("{word:?} is not key=value"))?;
            match key {
                "rights" => grant.rights = Rights::parse(value)?,
                "root" => {
                    crate::tree::manifest::components(value.trim_end_matches('/'))
                        .map_err(|e| format!("root {value:?}: {}", e.why))?;
                    grant.root = Some(value.trim_end_matches('/').to_owned());
                }
                "transfers" => {
                    let n: u32 = value
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| format!("transfers {value:?}: a count from 1"))?;
                    grant.transfers = Some(n);
                }
                "rate" => {
                    let rate = crate::units::parse_rate(value)
                        .map_err(|e| format!("rate {value:?}: {e}"))?;
                    grant.rate_bps = Some(rate);
                }
                "spool" => {
                    let bytes = crate::units::parse_size(value)
                        .map_err(|e| format!("spool {value:?}: {e}"))?;
                    grant.spool_bytes = Some(bytes);
                }
                other => {
                    return Err(format!(
                        "unknown key {other:?} (use rights, root, transfers, rate, spool)"
                    ));
                }
            }
        }
        Ok(grant)
    }
}

/// The accepted tokens and their grants.
#[derive(Clone)]
pub struct TokenSet {
    digests: Vec<[u8; 32]>,
    grants: Vec<Grant>,
}

impl fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenSet({} tokens)", self.digests.len())
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, bytes).as_ref());
    out
}

impl TokenSet {
    /// Reads the token file. Refuses a file that group or others may read, a line it cannot
    /// read (named by its number), and a file with no token (a server nobody can use is a
    /// mistake).
    pub fn load(path: &Path) -> Result<TokenSet, SessionError> {
        check_private(path, "token file")?;
        let text = std::fs::read_to_string(path)
            .map_err(|e| SessionError::io(format!("reading token file {}", path.display()), e))?;
        let set = TokenSet::parse(&text)
            .map_err(|e| SessionError::Config(format!("token file {}: {e}", path.display())))?;
        if set.is_empty() {
            return Err(SessionError::Config(format!(
                "token file {} has no token: add one per line",
                path.display()
            )));
        }
        Ok(set)
    }

    /// Tokens and grants from the text of a token file; the error names the line.
    pub fn parse(text: &str) -> Result<TokenSet, String> {
        let mut set = TokenSet { digests: Vec::new(), grants: Vec::new() };
        let mut lines = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let number = index + 1;
            let mut words = line.split_whitespace();
            let token = words.next().unwrap_or_default();
            let grant = Grant::parse(words).map_err(|e| format!("line {number}: {e}"))?;
            let digest = sha256(token.as_bytes());
            if let Some(first) = set.digests.iter().position(|d| *d == digest) {
                return Err(format!("line {number} repeats the token of line {}", lines[first]));
            }
            set.digests.push(digest);
            set.grants.push(grant);
            lines.push(number);
        }
        Ok(set)
    }

    /// Exactly one token, with every right: a one-shot server's.
    pub fn single(token: &str) -> TokenSet {
        TokenSet { digests: vec![sha256(token.trim().as_bytes())], grants: vec![Grant::default()] }
    }

    /// How many tokens are accepted.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether no token is accepted.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// The digest kept of the token at `index` (what a third-party grant's token tag is made
    /// of), or `None` when there is none there.
    pub fn digest(&self, index: usize) -> Option<&[u8; 32]> {
        self.digests.get(index)
    }

    /// Every token's digest, in the file's order (a token's index is its place here).
    pub(crate) fn digests(&self) -> &[[u8; 32]] {
        &self.digests
    }

    /// The grants, in the file's order.
    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// The index of `presented` among the tokens (its grant's in [`TokenSet::grants`]),
    /// compared in constant time.
    pub fn verify(&self, presented: &str) -> Option<usize> {
        let presented = sha256(presented.trim().as_bytes());
        let mut found = None;
        for (index, accepted) in self.digests.iter().enumerate() {
            // Every digest is compared, whatever matched before (tokens are unique).
            let equal = verify_slices_are_equal(accepted, &presented).is_ok();
            found = if equal { Some(index) } else { found };
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_grant_rights_roots_and_limits() {
        let text = "# tokens\n\nalpha\n  beta rights=read,list root=projects/run7/ transfers=2 \
                    rate=200Mbit\ngamma rights=write root=incoming\n";
        let set = TokenSet::parse(text).unwrap();
        assert_eq!(set.len(), 3);
        assert_eq!(set.verify("alpha"), Some(0));
        assert_eq!(set.verify(" beta "), Some(1));
        assert_eq!(set.verify("gamma"), Some(2));
        assert_eq!(set.verify("delta"), None);
        assert_eq!(set.verify("beta rights=read,list"), None);
        assert_eq!(set.grants()[0], Grant::default());
        let beta = &set.grants()[1];
        assert_eq!(beta.rights, Rights { read: true, write: false, list: true, relay: false });
        assert_eq!(beta.root.as_deref(), Some("projects/run7"));
        assert_eq!((beta.transfers, beta.rate_bps), (Some(2), Some(200_000_000)));
        assert_eq!(
            set.grants()[2].rights,
            Rights { read: false, write: true, list: false, relay: false }
        );
    }

    #[test]
    fn bad_lines_are_named_by_number_never_by_token() {
        let cases = [
            ("s3cret rights=read,delete", "line 1: unknown right \"delete\""),
            ("\ns3cret root=../etc", "line 2: root \"../etc\""),
            ("s3cret root=/etc", "line 1: root \"/etc\""),
            ("s3cret transfers=0", "line 1: transfers \"0\""),
            ("s3cret rate=fast", "line 1: rate \"fast\""),
            ("s3cret colour=blue", "line 1: unknown key \"colour\""),
            ("s3cret rights", "line 1: \"rights\" is not key=value"),
            ("s3cret\n# c\ns3cret rights=read", "line 3 repeats the token of line 1"),
        ];
        for (text, expected) in cases {
            let err = TokenSet::parse(text).unwrap_err();
            assert!(err.starts_with(expected), "{text:?}: {err}");
            assert!(!err.contains("s3cret"), "the error shows the token: {err}");
        }
    }
}
