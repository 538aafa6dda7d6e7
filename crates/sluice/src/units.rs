//! Quantities with explicit units: byte sizes (`1GiB`, `512MiB`, `100MB`, `4096`) and rates,
//! in bits (`800Mbit`, `1.5Gbit`, `500kbit`) or bytes per second (`100MB`, `64MiB`, optionally
//! with `/s`).

/// Parses a size; binary (KiB, MiB, GiB, TiB) and decimal (kB, MB, GB, TB) suffixes, or bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
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

/// Parses a rate into bits per second. A bare number is refused: whether it meant bits or
/// bytes is exactly the mistake the units are for.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bit_mult = match unit.trim() {
        "bit" | "bps" => Some(1.0),
        "kbit" | "Kbit" | "kbps" => Some(1e3),
        "Mbit" | "Mbps" => Some(1e6),
        "Gbit" | "Gbps" => Some(1e9),
        "" => return Err(format!("{text:?} has no unit: say 800Mbit (bits) or 100MB (bytes)")),
        _ => None,
    };
    let bits = match bit_mult {
        Some(mult) => {
            let value: f64 = num.parse().map_err(|_| format!("not a rate: {text:?}"))?;
            value * mult
        }
        None => parse_size(t)? as f64 * 8.0,
    };
    if !(1.0..=1e13).contains(&bits) {
        return Err(format!("rate out of range: {text:?} (1 bit/s to 10 Tbit/s)"));
    }
    Ok(bits.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::{parse_rate, parse_size};

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

    #[test]
    fn rates_in_bits_or_bytes_need_a_unit() {
        assert_eq!(parse_rate("800Mbit"), Ok(800_000_000));
        assert_eq!(parse_rate("1.5Gbit"), Ok(1_500_000_000));
        assert_eq!(parse_rate("500kbit"), Ok(500_000));
        assert_eq!(parse_rate("100MB"), Ok(800_000_000));
        assert_eq!(parse_rate("100MB/s"), Ok(800_000_000));
        assert_eq!(parse_rate("1MiB"), Ok(8 * 1024 * 1024));
        assert!(parse_rate("800").unwrap_err().contains("no unit"));
        assert!(parse_rate("0Mbit").is_err());
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("10 furlongs").is_err());
    }
}
