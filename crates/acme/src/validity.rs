//! When a certificate is valid: its `notBefore` and `notAfter`, read from the DER of
//! an X.509 certificate (RFC 5280 4.1) by walking the few elements before them. A
//! whole X.509 parser would be a large dependency for two timestamps.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail, ensure};

/// A certificate's validity period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// The first second it is valid.
    pub not_before: SystemTime,
    /// The last second it is valid.
    pub not_after: SystemTime,
}

impl Validity {
    /// Reads the validity of the DER certificate `der`.
    pub fn of_der(der: &[u8]) -> anyhow::Result<Self> {
        let (certificate, _) = element(der, SEQUENCE).context("not a certificate")?;
        let (tbs, _) = element(certificate, SEQUENCE).context("no tbsCertificate")?;
        let mut rest = tbs;
        // version [0] EXPLICIT, present from v2 on.
        if rest.first() == Some(&0xa0) {
            rest = element(rest, 0xa0)?.1;
        }
        rest = element(rest, INTEGER).context("no serial number")?.1;
        rest = element(rest, SEQUENCE).context("no signature algorithm")?.1;
        rest = element(rest, SEQUENCE).context("no issuer")?.1;
        let (validity, _) = element(rest, SEQUENCE).context("no validity")?;
        let (not_before, rest) = time(validity).context("notBefore")?;
        let (not_after, _) = time(rest).context("notAfter")?;
        ensure!(not_before <= not_after, "notBefore is after notAfter");
        Ok(Self {
            not_before,
            not_after,
        })
    }

    /// How long it is valid in all.
    pub fn lifetime(&self) -> Duration {
        self.not_after
            .duration_since(self.not_before)
            .unwrap_or_default()
    }

    /// When to renew it: `before` its end, or a third of its lifetime before, whichever
    /// comes later, so that a short-lived certificate (public CAs are moving to weeks
    /// and days) is not renewed the moment it arrives, and a renewal that fails has
    /// most of that third left to be retried.
    pub fn renew_at(&self, before: Duration) -> SystemTime {
        let margin = before.min(self.lifetime() / 3);
        self.not_after - margin
    }

    /// Seconds since the Unix epoch of its end, for metrics.
    pub fn not_after_unix(&self) -> u64 {
        self.not_after
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs())
    }
}

const INTEGER: u8 = 0x02;
const SEQUENCE: u8 = 0x30;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The contents of the DER element at the start of `der`, which must have `tag`, and
/// what follows it.
fn element(der: &[u8], tag: u8) -> anyhow::Result<(&[u8], &[u8])> {
    let (&found, rest) = der.split_first().context("truncated")?;
    ensure!(
        found == tag,
        "tag {found:#04x} where {tag:#04x} was expected"
    );
    let (&first, mut rest) = rest.split_first().context("truncated length")?;
    let length = if first < 0x80 {
        usize::from(first)
    } else {
        let bytes = usize::from(first & 0x7f);
        ensure!((1..=4).contains(&bytes), "length of {bytes} bytes");
        ensure!(rest.len() >= bytes, "truncated length");
        let (digits, after) = rest.split_at(bytes);
        rest = after;
        digits
            .iter()
            .fold(0usize, |length, &digit| length << 8 | usize::from(digit))
    };
    ensure!(rest.len() >= length, "truncated contents");
    Ok(rest.split_at(length))
}

/// A UTCTime or GeneralizedTime at the start of `der`, in the forms RFC 5280 allows
/// (`YYMMDDHHMMSSZ`, `YYYYMMDDHHMMSSZ`), and what follows it.
fn time(der: &[u8]) -> anyhow::Result<(SystemTime, &[u8])> {
    let tag = *der.first().context("truncated")?;
    let (text, rest) = element(der, tag)?;
    let digits = match (tag, text.len()) {
        (UTC_TIME, 13) | (GENERALIZED_TIME, 15) => &text[..text.len() - 1],
        _ => bail!("time of tag {tag:#04x} and {} bytes", text.len()),
    };
    ensure!(
        text.last() == Some(&b'Z') && digits.iter().all(u8::is_ascii_digit),
        "time not in YYMMDDHHMMSSZ form"
    );
    let number = |range: std::ops::Range<usize>| {
        digits[range]
            .iter()
            .fold(0i64, |value, digit| value * 10 + i64::from(digit - b'0'))
    };
    let (year, at) = if tag == UTC_TIME {
        // RFC 5280: 50-99 are 19xx, 00-49 20xx.
        let short = number(0..2);
        (if short >= 50 { 1900 } else { 2000 } + short, 2)
    } else {
        (number(0..4), 4)
    };
    let (month, day) = (number(at..at + 2), number(at + 2..at + 4));
    let (hour, minute, second) = (
        number(at + 4..at + 6),
        number(at + 6..at + 8),
        number(at + 8..at + 10),
    );
    ensure!(
        (1..=12).contains(&month)
            && (1..=31).contains(&day)
            && hour < 24
            && minute < 60
            && second < 61,
        "time out of range"
    );
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    let seconds = u64::try_from(seconds).context("a time before 1970")?;
    Ok((UNIX_EPOCH + Duration::from_secs(seconds), rest))
}

/// Days from 1970-01-01 to the proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(not_before: SystemTime, not_after: SystemTime) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["tracker.example".into()]).unwrap();
        params.not_before = not_before.into();
        params.not_after = not_after.into();
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn validity_is_read_from_utc_and_generalized_times() {
        let day = Duration::from_secs(86_400);
        // rcgen writes UTCTime up to 2049 and GeneralizedTime from 2050 (RFC 5280).
        for (before, after) in [
            (1_700_000_000, 1_700_000_000 + 90 * 86_400),
            (946_684_799, 2_524_608_000), // 1999-12-31T23:59:59 to 2050-01-01
            (951_782_400, 4_107_542_400), // 2000-02-29 to 2100-02-28
        ] {
            let not_before = UNIX_EPOCH + Duration::from_secs(before);
            let not_after = UNIX_EPOCH + Duration::from_secs(after);
            let validity = Validity::of_der(&certificate(not_before, not_after)).unwrap();
            assert_eq!(validity.not_before, not_before);
            assert_eq!(validity.not_after, not_after);
            assert_eq!(validity.not_after_unix(), after);
        }
        let start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let ninety = Validity {
            not_before: start,
            not_after: start + 90 * day,
        };
        assert_eq!(ninety.renew_at(30 * day), start + 60 * day);
        let six_days = Validity {
            not_before: start,
            not_after: start + 6 * day,
        };
        assert_eq!(
            six_days.renew_at(30 * day),
            start + 4 * day,
            "a third of a short lifetime"
        );
    }

    #[test]
    fn damaged_certificates_are_refused_not_misread() {
        let der = certificate(
            UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        );
        assert!(Validity::of_der(&der).is_ok());
        for cut in 0..der.len() {
            assert!(Validity::of_der(&der[..cut]).is_err(), "cut at {cut}");
        }
        assert!(Validity::of_der(b"").is_err());
        assert!(Validity::of_der(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(Validity::of_der(b"-----BEGIN CERTIFICATE-----").is_err());
    }
}
