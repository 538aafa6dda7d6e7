//! Rates with explicit units: bits (`800Mbit`, `1.5Gbit`, `500kbit`) or bytes per second
//! (`100MB`, `64MiB`, optionally with `/s`).

use crate::size::parse_size;

/// Parses a rate into bits per second. A bare number is refused: whether it meant bits or
/// bytes is exactly the mistake the units are for.
pub(crate) fn parse_rate(text: &str) -> Result<u64, String> {
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
    use super::parse_rate;

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
