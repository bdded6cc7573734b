//! The one calendar of the server: every date it writes is RFC 3339.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// RFC 3339 of a Unix time (`secs`, plus `micros`) seen at `offset_secs`
/// east of UTC: `Z` for UTC, `+hh:mm`/`-hh:mm` otherwise; whole seconds have
/// no fraction, as Python's `isoformat` (the reference) and
/// `git log --date=iso-strict` write them.
pub fn rfc3339(secs: i64, micros: u32, offset_secs: i32) -> String {
    let local = secs.saturating_add(i64::from(offset_secs));
    let days = local.div_euclid(86_400);
    let rem = local.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm), proleptic Gregorian.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // One allocation: a listing formats one of these per file.
    let mut out = String::with_capacity(32);
    let _ = write!(out, "{year:04}-{month:02}-{day:02}T{h:02}:{mi:02}:{s:02}");
    if micros != 0 {
        let _ = write!(out, ".{micros:06}");
    }
    match offset_secs {
        0 => out.push('Z'),
        o => {
            let sign = if o < 0 { '-' } else { '+' };
            let off = o.unsigned_abs();
            let _ = write!(out, "{sign}{:02}:{:02}", off / 3600, off % 3600 / 60);
        }
    }
    out
}

/// [`rfc3339`] of a system time, in UTC with microseconds.
pub fn utc(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    rfc3339(
        i64::try_from(d.as_secs()).unwrap_or(0),
        d.subsec_micros(),
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::new(1_709_251_199, 500_000);
        assert_eq!(utc(t), "2024-02-29T23:59:59.000500Z");
        let t = UNIX_EPOCH + Duration::from_secs(4_102_444_800);
        assert_eq!(utc(t), "2100-01-01T00:00:00Z");
    }

    #[test]
    fn dates_as_git_iso_strict() {
        assert_eq!(rfc3339(0, 0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_709_251_199, 0, 3600), "2024-03-01T00:59:59+01:00");
        assert_eq!(
            rfc3339(1_709_251_199, 0, -16_200),
            "2024-02-29T19:29:59-04:30"
        );
    }
}
