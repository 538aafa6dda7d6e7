//! The tokens a server accepts: one per line in an owner-only file; blank lines and `#` comments
//! are ignored, and surrounding whitespace is not part of a token.
//!
//! Only the SHA-256 of each token is kept. A presented token is hashed too and compared with
//! every accepted digest by `aws_lc_rs::constant_time::verify_slices_are_equal`, without stopping
//! at a match: neither the time taken nor the comparison reveals how much of a token was right,
//! its length, or which line matched.

use std::fmt;
use std::path::Path;

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::digest::{SHA256, digest};

use super::SessionError;
use super::identity::check_private;

/// The accepted tokens.
#[derive(Clone)]
pub struct TokenSet {
    digests: Vec<[u8; 32]>,
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
    /// Reads the token file. Refuses a file that group or others may read, and a file with no
    /// token (a server nobody can use is a mistake).
    pub fn load(path: &Path) -> Result<TokenSet, SessionError> {
        check_private(path, "token file")?;
        let text = std::fs::read_to_string(path)
            .map_err(|e| SessionError::io(format!("reading token file {}", path.display()), e))?;
        let set = TokenSet::parse(&text);
        if set.is_empty() {
            return Err(SessionError::Config(format!(
                "token file {} has no token: add one per line",
                path.display()
            )));
        }
        Ok(set)
    }

    /// Tokens from the text of a token file.
    pub fn parse(text: &str) -> TokenSet {
        let digests = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| sha256(l.as_bytes()))
            .collect();
        TokenSet { digests }
    }

    /// Exactly one token: a one-shot server's.
    pub fn single(token: &str) -> TokenSet {
        TokenSet { digests: vec![sha256(token.trim().as_bytes())] }
    }

    /// How many tokens are accepted.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether no token is accepted.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Whether `presented` is one of the tokens, compared in constant time.
    pub fn verify(&self, presented: &str) -> bool {
        let presented = sha256(presented.trim().as_bytes());
        let mut found = false;
        for accepted in &self.digests {
            // `|` and not `||`: every digest is compared, whatever matched before.
            found |= verify_slices_are_equal(accepted, &presented).is_ok();
        }
        found
    }
}
