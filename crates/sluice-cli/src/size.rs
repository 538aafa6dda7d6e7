//! Byte sizes with explicit units: `1GiB`, `512MiB`, `100MB`, `4096`.

/// Parses a size; binary (KiB, MiB, GiB, TiB) and decimal (kB, MB, GB, TB) suffixes, or bytes.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("not a size: {text:?}"))?;
    let mult: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KiB" | "K" => 1024.0,
        "MiB" | "M" => 1024.0 * 1024.0,
        "GiB" | "G" => 1024.0 * 1024.0 * 1024.0,
        "TiB" | "T" => 1024f64.powi(4),
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        other => {
            return Err(format!(
                "unknown size unit {other:?} in {text:?} (use KiB, MiB, GiB, MB, GB)"
            ));
        }
    };
    let bytes = value * mult;
    if !(0.0..=1.8e19).contains(&bytes) {
        return Err(format!("size out of range: {text:?}"));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("100MB"), Ok(100_000_000));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert!(parse_size("10 parsecs").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-1").is_err());
    }
}
