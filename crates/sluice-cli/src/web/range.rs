//! The parts of HTTP a download needs beyond axum: one byte range of a `Range` header (RFC
//! 9110 section 14), and a `Content-Disposition` that carries any file name safely.

/// Bytes `start..end` of a file (`end` exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteRange {
    pub(crate) start: u64,
    pub(crate) end: u64,
}

/// The range `header` asks of a file of `size` bytes: `bytes=a-b`, `bytes=a-` or `bytes=-n`.
/// `None` when it cannot be satisfied (then the answer is 416). Only one range is served: a
/// header of several, or one that is not `bytes=`, is taken as asking for the first.
pub(crate) fn parse_range(header: &str, size: u64) -> Option<ByteRange> {
    let spec = header.trim().strip_prefix("bytes=")?;
    let first = spec.split(',').next()?.trim();
    let (a, b) = first.split_once('-')?;
    let number = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let range = if a.is_empty() {
        let suffix = number(b)?;
        if suffix == 0 {
            return None;
        }
        ByteRange { start: size.saturating_sub(suffix), end: size }
    } else {
        let start = number(a)?;
        let end = if b.is_empty() { size } else { number(b)?.saturating_add(1).min(size) };
        ByteRange { start, end }
    };
    (range.start < range.end).then_some(range)
}

/// `attachment; filename="..."; filename*=UTF-8''...`: an ASCII stand-in (quotes, controls and
/// non-ASCII replaced by `_`) and the exact name percent-encoded.
pub(crate) fn content_disposition(name: &str) -> String {
    let plain: String = name
        .chars()
        .map(|c| if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' { c } else { '_' })
        .collect();
    let mut encoded = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{plain}\"; filename*=UTF-8''{encoded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_of_a_ten_byte_file() {
        let r = |s, e| Some(ByteRange { start: s, end: e });
        assert_eq!(parse_range("bytes=0-4", 10), r(0, 5));
        assert_eq!(parse_range("bytes=4-", 10), r(4, 10));
        assert_eq!(parse_range("bytes=-3", 10), r(7, 10));
        assert_eq!(parse_range("bytes=8-100", 10), r(8, 10));
        assert_eq!(parse_range("bytes=-30", 10), r(0, 10));
        assert_eq!(parse_range("bytes=2-3, 5-6", 10), r(2, 4));
        for bad in
            ["bytes=10-", "bytes=5-2", "bytes=-0", "items=0-1", "bytes=a-b", "bytes=+1-2", ""]
        {
            assert_eq!(parse_range(bad, 10), None, "{bad}");
        }
        assert_eq!(parse_range("bytes=0-", 0), None);
    }

    #[test]
    fn any_name_is_a_safe_header_value() {
        let d = content_disposition("a \"b\"\n<é>.txt");
        assert_eq!(
            d,
            "attachment; filename=\"a _b__<_>.txt\"; filename*=UTF-8''a%20%22b%22%0A%3C%C3%A9%3E.txt"
        );
        assert!(axum::http::HeaderValue::from_str(&d).is_ok());
    }
}
