//! Query strings: `key=value&key=value`, percent-encoded.
//!
//! Info hashes and peer ids are binary: clients percent-encode every byte outside the
//! unreserved set, so decoding must produce bytes, not text. `+` is taken literally
//! (BitTorrent clients encode a real `+` as `%2B`, and a space never occurs in these
//! values).

/// Iterates over the raw `(key, value)` pairs of a query string; empty segments (as in
/// `a=1&&b=2`) are skipped and a segment without `=` has an empty value.
pub fn pairs(query: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    query
        .split(|&b| b == b'&')
        .filter(|segment| !segment.is_empty())
        .map(|segment| match segment.iter().position(|&b| b == b'=') {
            Some(eq) => (&segment[..eq], &segment[eq + 1..]),
            None => (segment, &segment[segment.len()..]),
        })
}

/// Percent-decodes `input` into `out` (cleared first). `None` if an escape is not two
/// hex digits.
pub fn decode_into(input: &[u8], out: &mut Vec<u8>) -> Option<()> {
    out.clear();
    let mut i = 0;
    while i < input.len() {
        let byte = input[i];
        if byte == b'%' {
            let high = hex_value(*input.get(i + 1)?)?;
            let low = hex_value(*input.get(i + 2)?)?;
            out.push(high << 4 | low);
            i += 3;
        } else {
            out.push(byte);
            i += 1;
        }
    }
    Some(())
}

/// Percent-decodes a value that must be exactly `N` bytes long (info hash, peer id),
/// without allocating.
pub fn decode_fixed<const N: usize>(input: &[u8]) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    let mut len = 0;
    let mut i = 0;
    while i < input.len() {
        let slot = out.get_mut(len)?;
        if input[i] == b'%' {
            *slot = hex_value(*input.get(i + 1)?)? << 4 | hex_value(*input.get(i + 2)?)?;
            i += 3;
        } else {
            *slot = input[i];
            i += 1;
        }
        len += 1;
    }
    (len == N).then_some(out)
}

/// Percent-encodes `bytes`, keeping RFC 3986 unreserved characters as they are.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for &byte in bytes {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.push('%');
            out.push(HEX[usize::from(byte >> 4)] as char);
            out.push(HEX[usize::from(byte & 15)] as char);
        }
    }
    out
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Parses an unsigned decimal number (no sign, no spaces).
pub fn parse_u64(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &digit in value {
        if !digit.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(digit - b'0'))?;
    }
    Some(n)
}

/// Parses a decimal number with an optional leading `-`.
pub fn parse_i64(value: &[u8]) -> Option<i64> {
    match value.split_first() {
        Some((b'-', rest)) => parse_u64(rest).and_then(|n| 0i64.checked_sub_unsigned(n)),
        _ => parse_u64(value).and_then(|n| i64::try_from(n).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_split_on_ampersands_and_equals() {
        let got: Vec<_> = pairs(b"a=1&&b=&c&d=x=y").collect();
        assert_eq!(
            got,
            vec![
                (&b"a"[..], &b"1"[..]),
                (b"b", b""),
                (b"c", b""),
                (b"d", b"x=y")
            ]
        );
    }

    #[test]
    fn percent_decoding() {
        let mut out = Vec::new();
        assert_eq!(decode_into(b"%00%ffA%2Bz+", &mut out), Some(()));
        assert_eq!(out, b"\x00\xffA+z+");
        assert_eq!(decode_into(b"%zz", &mut out), None);
        assert_eq!(decode_into(b"ab%4", &mut out), None);
        assert_eq!(decode_fixed::<3>(b"a%62c"), Some(*b"abc"));
        assert_eq!(decode_fixed::<3>(b"ab"), None);
        assert_eq!(decode_fixed::<3>(b"abcd"), None);
    }

    #[test]
    fn encoding_round_trips() {
        let bytes: Vec<u8> = (0..=255).collect();
        let encoded = encode(&bytes);
        assert_eq!(
            decode_fixed::<256>(encoded.as_bytes()).unwrap().to_vec(),
            bytes
        );
        assert_eq!(encode(b"a-Z~ /"), "a-Z~%20%2F");
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"1a"), None);
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"-"), None);
    }
}
