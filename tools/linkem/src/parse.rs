//! Parsers for the command-line units: rates, durations, sizes and probabilities.

use crate::model::QueueLimit;

fn split_number(s: &str) -> Result<(f64, String), String> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '_'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let value: f64 = num
        .replace('_', "")
        .parse()
        .map_err(|_| format!("`{s}`: expected a number followed by a unit"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("`{s}`: expected a finite, non-negative number"));
    }
    Ok((value, unit.trim().to_ascii_lowercase()))
}

/// Parses a rate such as `1000mbit`, `1gbit`, `500kbit`, `100mbps` (megabytes per second, as tc
/// spells it), `12000000bit` or `0` (unlimited). Returns bits per second.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let (v, unit) = split_number(s)?;
    let mult = match unit.as_str() {
        "" | "bit" => 1.0,
        "kbit" | "k" => 1e3,
        "mbit" | "m" => 1e6,
        "gbit" | "g" => 1e9,
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        _ => return Err(format!("`{s}`: unknown rate unit `{unit}` (use bit, kbit, mbit, gbit)")),
    };
    Ok((v * mult).round() as u64)
}

/// Parses a duration such as `50ms`, `250us`, `1.5s`, `0`. Returns nanoseconds.
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let (v, unit) = split_number(s)?;
    let mult = match unit.as_str() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "" if v == 0.0 => 0.0,
        _ => return Err(format!("`{s}`: unknown duration unit `{unit}` (use ns, us, ms, s)")),
    };
    Ok((v * mult).round() as u64)
}

/// Parses a queue limit: bytes (`100000`, `64kb`, `1.5mb`, `100000b`) or packets (`100p`,
/// `100pkt`). `k`/`kb` are 1000 bytes, `kib` 1024.
pub fn parse_queue(s: &str) -> Result<QueueLimit, String> {
    let (v, unit) = split_number(s)?;
    let bytes = |m: f64| Ok(QueueLimit::Bytes((v * m).round() as u64));
    match unit.as_str() {
        "p" | "pkt" | "pkts" | "packets" => Ok(QueueLimit::Packets(v.round() as u64)),
        "" | "b" => bytes(1.0),
        "k" | "kb" => bytes(1e3),
        "kib" => bytes(1024.0),
        "m" | "mb" => bytes(1e6),
        "mib" => bytes(1024.0 * 1024.0),
        _ => Err(format!("`{s}`: unknown queue unit `{unit}` (use b, kb, mb, kib, mib or p)")),
    }
}

/// Parses a probability: `1%`, `0.5%` or a fraction in `[0, 1]` such as `0.01`.
pub fn parse_probability(s: &str) -> Result<f64, String> {
    let (v, unit) = split_number(s)?;
    let p = match unit.as_str() {
        "%" => v / 100.0,
        "" => v,
        _ => return Err(format!("`{s}`: write a percentage (`1%`) or a fraction (`0.01`)")),
    };
    if p > 1.0 {
        return Err(format!("`{s}`: probability above 1 (write `1%` for one percent)"));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("1000mbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("2.5Mbit"), Ok(2_500_000));
        assert_eq!(parse_rate("10mbps"), Ok(80_000_000));
        assert_eq!(parse_rate("1200bit"), Ok(1200));
        assert_eq!(parse_rate("0"), Ok(0));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("10 furlongs").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("50ms"), Ok(50_000_000));
        assert_eq!(parse_duration_ns("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration_ns("250us"), Ok(250_000));
        assert_eq!(parse_duration_ns("0"), Ok(0));
        assert!(parse_duration_ns("50").is_err());
    }

    #[test]
    fn queues() {
        assert_eq!(parse_queue("100p"), Ok(QueueLimit::Packets(100)));
        assert_eq!(parse_queue("64kb"), Ok(QueueLimit::Bytes(64_000)));
        assert_eq!(parse_queue("1mib"), Ok(QueueLimit::Bytes(1_048_576)));
        assert_eq!(parse_queue("15000"), Ok(QueueLimit::Bytes(15_000)));
        assert!(parse_queue("3 bananas").is_err());
    }

    #[test]
    fn probabilities() {
        assert_eq!(parse_probability("1%"), Ok(0.01));
        assert_eq!(parse_probability("0.03"), Ok(0.03));
        assert!(parse_probability("3").is_err());
        assert!(parse_probability("-1%").is_err());
    }
}
