//! `format` as an assertion: each known format as a regular language over code points.
//!
//! The reference is what the `jsonschema` package's format checker accepts (with its optional
//! dependencies installed), since that is how labelled corpora were produced, refined where that
//! checker is laxer than its own RFC only through an accident of Python's `re` (`$` also matching
//! before a trailing newline): those texts are refused here.
//!
//! | format | language |
//! |---|---|
//! | `date-time` | RFC 3339 `date-time`: real calendar days (leap years included), hours 00-23, seconds 00-59 (no leap second, as `rfc3339_validator`), `T`/`Z` in either case |
//! | `date`, `time` | the `full-date` and `full-time` parts of the same |
//! | `duration` | the RFC 3339 appendix A grammar (`P1Y2M`, `PT1H`, `P2W`) |
//! | `uuid` | 8-4-4-4-12 hex digits with hyphens |
//! | `email`, `idn-email` | contains `@` (the checker's rule) |
//! | `hostname` | RFC 1123 labels of 1-63 letters, digits and inner hyphens, dot separated, at most 253 characters before an optional final dot |
//! | `ipv4` | four decimal octets 0-255 without leading zeros |
//! | `ipv6` | RFC 4291 text forms, `::` compression, embedded IPv4, no zone |
//! | `uri`, `uri-reference`, `iri`, `iri-reference` | the RFC 3986 / RFC 3987 grammars, as `rfc3987` spells them |
//! | `json-pointer`, `relative-json-pointer` | RFC 6901 and the relative JSON pointer draft |
//!
//! The languages are written as patterns in the crate's own dialect and parsed once per use; the
//! calendar rule for days is spelled out month by month, with February 29 only in leap years. Other
//! formats (`regex` is not regular; `uri-template`, `idn-hostname` and the many vendor formats are
//! not implemented) are unknown: the compiler refuses them in strict mode and ignores them with a
//! warning otherwise.

use crate::regex::{parse, Hir};

/// Years 0001-9999, split by whether they are leap years.
const LEAP_YEAR: &str =
    r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)";

fn full_date() -> String {
    let d31 = r"(?:0[1-9]|[12][0-9]|3[01])";
    let d30 = r"(?:0[1-9]|[12][0-9]|30)";
    let d28 = r"(?:0[1-9]|1[0-9]|2[0-8])";
    let year = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)";
    format!(
        r"(?:{year}-(?:(?:0[13578]|1[02])-{d31}|(?:0[469]|11)-{d30}|02-{d28})|{LEAP_YEAR}-02-29)"
    )
}

fn full_time() -> &'static str {
    r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
}

fn duration() -> String {
    let second = r"[0-9]+S";
    let minute = format!(r"[0-9]+M(?:{second})?");
    let hour = format!(r"[0-9]+H(?:{minute})?");
    let time = format!(r"T(?:{hour}|{minute}|{second})");
    let day = r"[0-9]+D";
    let month = format!(r"[0-9]+M(?:{day})?");
    let year = format!(r"[0-9]+Y(?:{month})?");
    let date = format!(r"(?:{day}|{month}|{year})(?:{time})?");
    format!(r"P(?:{date}|{time}|[0-9]+W)")
}

fn hostname() -> String {
    let label = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    format!(r"(?:{label}\.)*{label}\.?")
}

fn dec_octet() -> &'static str {
    r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
}

fn ipv4(octet: &str) -> String {
    format!(r"{octet}(?:\.{octet}){{3}}")
}

fn ipv6(octet: &str) -> String {
    let h = r"[0-9A-Fa-f]{1,4}";
    let ls32 = format!(r"(?:{h}:{h}|{})", ipv4(octet));
    [
        format!(r"(?:{h}:){{6}}{ls32}"),
        format!(r"::(?:{h}:){{5}}{ls32}"),
        format!(r"(?:{h})?::(?:{h}:){{4}}{ls32}"),
        format!(r"(?:(?:{h}:)?{h})?::(?:{h}:){{3}}{ls32}"),
        format!(r"(?:(?:{h}:){{0,2}}{h})?::(?:{h}:){{2}}{ls32}"),
        format!(r"(?:(?:{h}:){{0,3}}{h})?::{h}:{ls32}"),
        format!(r"(?:(?:{h}:){{0,4}}{h})?::{ls32}"),
        format!(r"(?:(?:{h}:){{0,5}}{h})?::{h}"),
        format!(r"(?:(?:{h}:){{0,6}}{h})?::"),
    ]
    .map(|b| format!("(?:{b})"))
    .join("|")
}

/// RFC 3986 (`iri = false`) or RFC 3987 (`iri = true`) references, as the `rfc3987` package
/// spells the grammar. `rule` is `URI`/`IRI` (`absolute = true`) or the `_reference` forms.
fn uri(iri: bool, absolute: bool) -> String {
    let ucschar = r"\xA0-\uD7FF\uF900-\uFDCF\uFDF0-\uFFEF\U00010000-\U0001FFFD\U00020000-\U0002FFFD\U00030000-\U0003FFFD\U00040000-\U0004FFFD\U00050000-\U0005FFFD\U00060000-\U0006FFFD\U00070000-\U0007FFFD\U00080000-\U0008FFFD\U00090000-\U0009FFFD\U000A0000-\U000AFFFD\U000B0000-\U000BFFFD\U000C0000-\U000CFFFD\U000D0000-\U000DFFFD\U000E1000-\U000EFFFD";
    let iprivate = r"\uE000-\uF8FF\U000F0000-\U000FFFFD\U00100000-\U0010FFFD";
    let unreserved_set = if iri {
        format!(r"a-zA-Z0-9._~\-{ucschar}")
    } else {
        r"a-zA-Z0-9._~\-".to_string()
    };
    let sub = r"!$&'()*+,;=";
    let pct = r"%[0-9A-Fa-f]{2}";
    let pchar = format!(r"(?:[{unreserved_set}{sub}:@]|{pct})");
    let seg = format!("{pchar}*");
    let seg_nz = format!("{pchar}+");
    let seg_nz_nc = format!(r"(?:[{unreserved_set}{sub}@]|{pct})+");
    // rfc3987 keeps the legacy dec-octet with leading zeros inside URIs.
    let octet = r"(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)";
    let ipv6 = ipv6(octet);
    let ip_literal = format!(r"\[(?:{ipv6}|v[0-9A-Fa-f]+\.[a-zA-Z0-9._~\-{sub}:]+)\]");
    let reg_name = format!(r"(?:[{unreserved_set}{sub}]|{pct})*");
    let host = format!(r"(?:{ip_literal}|{}|{reg_name})", ipv4(octet));
    let userinfo = format!(r"(?:[{unreserved_set}{sub}:]|{pct})*");
    let authority = format!(r"(?:{userinfo}@)?{host}(?::[0-9]*)?");
    let abempty = format!(r"(?:/{seg})*");
    let absolute_path = format!(r"/(?:{seg_nz}(?:/{seg})*)?");
    let rootless = format!(r"{seg_nz}(?:/{seg})*");
    let noscheme = format!(r"{seg_nz_nc}(?:/{seg})*");
    let query = if iri {
        format!(r"(?:{pchar}|[{iprivate}/?])*")
    } else {
        format!(r"(?:{pchar}|[/?])*")
    };
    let fragment = format!(r"(?:{pchar}|[/?])*");
    let scheme = r"[a-zA-Z][a-zA-Z0-9+.\-]*";
    let hier = format!(r"(?://{authority}{abempty}|{absolute_path}|{rootless}|)");
    let relative = format!(r"(?://{authority}{abempty}|{absolute_path}|{noscheme}|)");
    let full = format!(r"{scheme}:{hier}(?:\?{query})?(?:#{fragment})?");
    if absolute {
        full
    } else {
        format!(r"(?:{full}|{relative}(?:\?{query})?(?:#{fragment})?)")
    }
}

fn json_pointer() -> &'static str {
    r"(?:/(?:[^/~]|~[01])*)*"
}

/// The value language of a known format; `None` for a format this module does not know.
pub(crate) fn format_value(name: &str) -> Option<Hir> {
    let pattern = match name {
        "date-time" => format!(r"{}[Tt]{}", full_date(), full_time()),
        "date" => full_date(),
        "time" => full_time().to_string(),
        "duration" => duration(),
        "uuid" => r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
            .to_string(),
        "email" | "idn-email" => r"(?s:.*@.*)".to_string(),
        "hostname" => hostname(),
        "ipv4" => ipv4(dec_octet()),
        "ipv6" => ipv6(dec_octet()),
        "uri" => uri(false, true),
        "uri-reference" => uri(false, false),
        "iri" => uri(true, true),
        "iri-reference" => uri(true, false),
        "json-pointer" => json_pointer().to_string(),
        "relative-json-pointer" => format!(r"(?:0|[1-9][0-9]*)(?:#|{})", json_pointer()),
        _ => return None,
    };
    let h = parse(&pattern).ok()?;
    if name == "hostname" {
        // At most 253 characters, not counting a final dot.
        let length = parse(r"(?s:.{1,253}\.?)").ok()?;
        return Some(Hir::intersection([h, length]));
    }
    Some(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_schema::matcher::matches;

    fn check(format: &str, good: &[&str], bad: &[&str]) {
        let h = format_value(format).unwrap_or_else(|| panic!("{format} unknown"));
        for s in good {
            assert!(matches(&h, s), "{format} should accept {s:?}");
        }
        for s in bad {
            assert!(!matches(&h, s), "{format} should refuse {s:?}");
        }
    }

    #[test]
    fn dates_follow_the_calendar() {
        check(
            "date",
            &["2024-02-29", "2000-02-29", "1999-12-31", "0001-01-01"],
            &[
                "2023-02-29",
                "1900-02-29",
                "2024-04-31",
                "2024-13-01",
                "0000-01-01",
                "2024-1-01",
                "2024-01-01\n",
            ],
        );
        check(
            "date-time",
            &[
                "2024-02-29T23:59:59Z",
                "1990-12-31t15:59:59.123z",
                "2020-01-01T00:00:00+05:30",
            ],
            &[
                "2024-02-29T24:00:00Z",
                "2024-02-29T23:59:60Z",
                "2024-02-29T23:59:59",
                "2024-02-29 23:59:59Z",
            ],
        );
        check(
            "time",
            &["08:30:06Z", "23:59:59.5-01:00"],
            &["8:30:06Z", "08:30:06"],
        );
    }

    #[test]
    fn durations() {
        check(
            "duration",
            &["P4DT12H30M5S", "P1Y", "PT36H", "P2W", "P1M2D", "PT1M30S"],
            &["P", "PT", "P1D2H", "P2W1D", "1Y", "PT1D", "P1Y2D"],
        );
    }

    #[test]
    fn addresses_and_names() {
        check(
            "ipv4",
            &["192.168.0.1", "0.0.0.0", "255.255.255.255"],
            &["256.0.0.1", "01.2.3.4", "1.2.3", "1.2.3.4.5"],
        );
        check(
            "ipv6",
            &[
                "::1",
                "::",
                "1:2:3:4:5:6:7:8",
                "1::8",
                "::ffff:192.168.0.1",
                "1:2:3:4:5:6:7::",
                "fe80::1",
            ],
            &[
                "1:2:3:4:5:6:7:8:9",
                "1::2::3",
                ":1:2:3:4:5:6:7:8",
                "::ffff:01.2.3.4",
                "fe80::1%eth0",
                "12345::",
            ],
        );
        check(
            "hostname",
            &[
                "example.com",
                "a",
                "xn--bcher-kva.example",
                "a-b.c",
                "example.com.",
            ],
            &["-a.com", "a-.com", "a..b", "", &"a".repeat(64), "a_b.com"],
        );
        let long = vec!["a".repeat(63); 4].join(".");
        assert_eq!(long.len(), 255);
        check("hostname", &[&long[..253]], &[&long]);
        check("email", &["a@b", "@", "x y@z"], &["ab"]);
        check(
            "uuid",
            &["2eb8aa08-aa98-11ea-b4aa-73b441d16380"],
            &[
                "2eb8aa08aa9811eab4aa73b441d16380",
                "2eb8aa08-aa98-11ea-b4aa-73b441d1638",
            ],
        );
    }

    #[test]
    fn uris_and_pointers() {
        check(
            "uri",
            &[
                "http://example.com/a?b=c#d",
                "urn:isbn:0451450523",
                "mailto:a@b.c",
                "http://[::1]:80/",
                "file:///x",
            ],
            &[
                "//example.com",
                "/relative",
                "http://exa mple.com",
                "a",
                "http://example.com/\u{e9}",
            ],
        );
        check(
            "uri-reference",
            &["/relative", "#frag", "", "a/b?c", "http://x"],
            &["\\\\x", "a b"],
        );
        check("iri", &["http://\u{e9}x.com/\u{e9}"], &["\u{e9}"]);
        check("json-pointer", &["", "/a/b~0~1", "/"], &["a", "/~2"]);
        check(
            "relative-json-pointer",
            &["0", "1/a", "2#"],
            &["01", "-1", "/a"],
        );
    }
}
