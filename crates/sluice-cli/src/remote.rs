//! scp-style locations: `host:path`, `[v6addr]:path`, or a local path.

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// A path on this machine.
    Local(String),
    /// A path on a server.
    Remote {
        /// Host name or address (brackets removed from IPv6).
        host: String,
        /// Path under the server's root.
        path: String,
    },
}

/// Parses `spec` the way scp does: a colon before any slash makes it remote; a leading `/` or
/// `./`, or no colon, makes it local; `[addr]:path` is an IPv6 host.
pub(crate) fn parse_location(spec: &str) -> Result<Location, String> {
    if spec.is_empty() {
        return Err("empty path".into());
    }
    if let Some(rest) = spec.strip_prefix('[') {
        let (host, after) =
            rest.split_once(']').ok_or_else(|| format!("unclosed '[' in {spec}"))?;
        let path =
            after.strip_prefix(':').ok_or_else(|| format!("expected ':' after ']' in {spec}"))?;
        if host.is_empty() {
            return Err(format!("empty host in {spec}"));
        }
        return Ok(Location::Remote { host: host.to_string(), path: path.to_string() });
    }
    if spec.starts_with('/') || spec.starts_with("./") || spec.starts_with("../") {
        return Ok(Location::Local(spec.to_string()));
    }
    match spec.find(':') {
        Some(colon) if !spec[..colon].contains('/') => {
            let (host, path) = (&spec[..colon], &spec[colon + 1..]);
            if host.is_empty() {
                return Err(format!("empty host in {spec}"));
            }
            Ok(Location::Remote { host: host.to_string(), path: path.to_string() })
        }
        _ => Ok(Location::Local(spec.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(host: &str, path: &str) -> Location {
        Location::Remote { host: host.into(), path: path.into() }
    }

    #[test]
    fn scp_style_locations() {
        assert_eq!(parse_location("server:data/a.bin"), Ok(remote("server", "data/a.bin")));
        assert_eq!(parse_location("10.0.0.1:a"), Ok(remote("10.0.0.1", "a")));
        assert_eq!(parse_location("[::1]:x/y"), Ok(remote("::1", "x/y")));
        assert_eq!(parse_location("host:"), Ok(remote("host", "")));
        assert_eq!(parse_location("local.bin"), Ok(Location::Local("local.bin".into())));
        assert_eq!(parse_location("/abs/p:q"), Ok(Location::Local("/abs/p:q".into())));
        assert_eq!(parse_location("./a:b"), Ok(Location::Local("./a:b".into())));
        assert_eq!(parse_location("dir/a:b"), Ok(Location::Local("dir/a:b".into())));
        assert!(parse_location("").is_err());
        assert!(parse_location(":path").is_err());
        assert!(parse_location("[::1]path").is_err());
        assert!(parse_location("[::1").is_err());
    }
}
