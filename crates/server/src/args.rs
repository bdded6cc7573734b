//! Argument validation against the catalog (client contract notes §1).
//!
//! One decoder serves every integer of every tool: a JSON integer, or a
//! number with an integral value, in the argument's domain and at most
//! 2^53−1. Fractions, strings, booleans, negatives, values under the minimum
//! and unknown argument names are refused; nothing is rounded, converted or
//! clamped. What comes out is canonical JSON (`12`, never `12.0`).

use serde_json::{Map, Number, Value, json};

use crate::catalog::{Kind, Param, ToolSpec};
#[cfg(test)]
use crate::envelope::ErrorCode;
use crate::envelope::ToolError;

/// The largest integer a client can send without losing precision.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Validates `arguments` for `spec`; returns them with integers canonical and
/// optional nulls dropped.
pub fn validate(
    spec: &ToolSpec,
    arguments: Option<&Value>,
) -> Result<Map<String, Value>, ToolError> {
    let given = match arguments {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(invalid(
                format!("arguments must be an object, not {}", type_name(other)),
                json!({ "reason": "arguments_not_object" }),
            ));
        }
    };
    let mut unknown: Vec<&str> = given
        .keys()
        .filter(|k| !spec.params.iter().any(|p| p.name == k.as_str()))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        unknown.sort_unstable();
        let accepted: Vec<&str> = spec.params.iter().map(|p| p.name).collect();
        return Err(invalid(
            format!(
                "unknown argument{} for {}: {}",
                if unknown.len() == 1 { "" } else { "s" },
                spec.name,
                unknown.join(", ")
            ),
            json!({ "reason": "unknown_argument", "unknown": unknown, "accepted": accepted }),
        ));
    }
    let mut out = Map::new();
    for p in spec.params {
        match given.get(p.name) {
            None | Some(Value::Null) if p.required => {
                return Err(invalid(
                    format!("{} is required", p.name),
                    json!({ "reason": "missing_argument", "argument": p.name }),
                ));
            }
            None | Some(Value::Null) => {}
            Some(v) => {
                out.insert(p.name.to_owned(), check(p, v)?);
            }
        }
    }
    Ok(out)
}

fn check(p: &Param, v: &Value) -> Result<Value, ToolError> {
    let wrong = |expected: &str| {
        invalid(
            format!("{} must be {expected}, not {}", p.name, type_name(v)),
            json!({ "reason": "wrong_type", "argument": p.name, "expected": expected, "received_type": type_name(v) }),
        )
    };
    match p.kind {
        Kind::Str {
            min_len, choices, ..
        } => {
            let Value::String(s) = v else {
                return Err(wrong("a string"));
            };
            if let Some(min) = min_len
                && (s.chars().count() as u64) < min
            {
                return Err(invalid(
                    format!("{} must not be empty", p.name),
                    json!({ "reason": "too_short", "argument": p.name, "min_length": min }),
                ));
            }
            if !choices.is_empty() && !choices.contains(&s.as_str()) {
                return Err(invalid(
                    format!("{} must be one of {}", p.name, choices.join(", ")),
                    json!({ "reason": "not_allowed", "argument": p.name, "allowed": choices }),
                ));
            }
            Ok(v.clone())
        }
        Kind::Int { min, max, .. } => {
            let n = integral(p.name, v)?;
            let upper = max.unwrap_or(MAX_SAFE_INTEGER);
            if n < min || n > upper {
                return Err(invalid(
                    format!("{} must be between {min} and {upper}, got {n}", p.name),
                    json!({ "reason": "out_of_range", "argument": p.name, "minimum": min, "maximum": upper }),
                ));
            }
            Ok(Value::Number(Number::from(n)))
        }
        Kind::Bool { .. } => match v {
            Value::Bool(_) => Ok(v.clone()),
            _ => Err(wrong("a boolean")),
        },
        Kind::StrList => match v {
            Value::Array(items) if items.iter().all(Value::is_string) => Ok(v.clone()),
            _ => Err(wrong("an array of strings")),
        },
        Kind::StrMap => match v {
            Value::Object(m) if m.values().all(Value::is_string) => Ok(v.clone()),
            _ => Err(wrong("an object of string values")),
        },
        Kind::Object => match v {
            Value::Object(_) => Ok(v.clone()),
            _ => Err(wrong("an object")),
        },
        Kind::Key => {
            let Value::String(s) = v else {
                return Err(wrong("a string"));
            };
            let n = s.chars().count();
            let max = ctm_patch_engine::MAX_IDEMPOTENCY_KEY_CHARS;
            if n == 0 || n > max {
                return Err(invalid(
                    format!("{} must be 1 to {max} characters, not {n}", p.name),
                    json!({ "reason": "out_of_range", "argument": p.name, "min_length": 1, "max_length": max }),
                ));
            }
            Ok(v.clone())
        }
        Kind::Changes => match v {
            Value::Array(items) if items.len() > ctm_patch_engine::MAX_CHANGES => Err(invalid(
                format!(
                    "{} holds {} entries, more than {}",
                    p.name,
                    items.len(),
                    ctm_patch_engine::MAX_CHANGES
                ),
                json!({ "reason": "too_many", "argument": p.name, "max_changes": ctm_patch_engine::MAX_CHANGES, "received": items.len() }),
            )),
            Value::Array(_) => Ok(v.clone()),
            _ => Err(wrong("an array of changes")),
        },
    }
}

/// The one integer decoder: integers and integral numbers in 0..=2^53−1.
///
/// Decided on the number's decimal text, never through a float: serde_json
/// keeps each literal as written (`arbitrary_precision`), so `12.0`, `1.2e1`
/// and `1200e-2` are 12, while `1.00000000000000000001` and
/// `4503599627370496.5` are fractions, not numbers a float rounded to an
/// integer.
pub fn integral(name: &str, v: &Value) -> Result<u64, ToolError> {
    let refuse = |why: &str, reason: &str| {
        invalid(
            format!("{name} must be a non-negative integer ({why})"),
            json!({ "reason": reason, "argument": name, "maximum_safe_integer": MAX_SAFE_INTEGER }),
        )
    };
    let Value::Number(n) = v else {
        return Err(refuse(&format!("got {}", type_name(v)), "wrong_type"));
    };
    match exact_decimal(&n.to_string()) {
        Decimal::Integer(u) if u <= MAX_SAFE_INTEGER => Ok(u),
        Decimal::Integer(_) | Decimal::Huge => Err(refuse("above 2^53-1", "unsafe_integer")),
        Decimal::Negative => Err(refuse("negative", "negative")),
        Decimal::Fraction => Err(refuse("has a fractional part", "fractional")),
        Decimal::Malformed => Err(refuse("not a number", "wrong_type")),
    }
}

/// What a JSON number literal is, exactly.
#[derive(Debug, PartialEq)]
enum Decimal {
    /// A non-negative integer of at most 16 significant digits (`-0` is 0).
    Integer(u64),
    /// A non-negative integer of more than 16 digits: above 2^53−1.
    Huge,
    /// Below zero.
    Negative,
    /// Not an integer.
    Fraction,
    /// Not a JSON number literal (never produced by the parser).
    Malformed,
}

/// Reads a JSON number literal (`-?digits(.digits)?([eE][+-]?digits)?`)
/// exactly: significant digits and a power of ten, in time linear in its
/// length, whatever its exponent.
fn exact_decimal(text: &str) -> Decimal {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match body.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (body, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) {
        return Decimal::Malformed;
    }
    // value = significant digits × 10^power
    let digits = format!("{whole}{fraction}");
    let significant = digits.trim_start_matches('0');
    let kept = significant.trim_end_matches('0');
    if kept.is_empty() {
        return Decimal::Integer(0);
    }
    if negative {
        return Decimal::Negative;
    }
    let trailing_zeros = significant.len() - kept.len();
    let exponent = match exponent {
        None => Some(0),
        Some(e) => {
            let digits_only = e.strip_prefix(['+', '-']).unwrap_or(e);
            if digits_only.is_empty() || !all_digits(digits_only) {
                return Decimal::Malformed;
            }
            e.parse::<i64>().ok()
        }
    };
    let Some(exponent) = exponent else {
        // An exponent beyond i64: its sign alone decides.
        return if body.contains("e-") || body.contains("E-") {
            Decimal::Fraction
        } else {
            Decimal::Huge
        };
    };
    let power = i128::from(exponent) + trailing_zeros as i128 - fraction.len() as i128;
    if power < 0 {
        return Decimal::Fraction;
    }
    if kept.len() as i128 + power > 16 {
        return Decimal::Huge;
    }
    let mut value: u64 = 0;
    for b in kept.bytes() {
        value = value * 10 + u64::from(b - b'0');
    }
    for _ in 0..power {
        value *= 10;
    }
    Decimal::Integer(value)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn invalid(message: String, details: Value) -> ToolError {
    ToolError::invalid_argument(message, details)
}

/// A typed argument read from a validated map: the value given, else the
/// catalog's default for it. `Option<T>` is exactly what was given (absent
/// or null is `None`, whatever the default).
pub trait FromArg: Sized {
    /// Whether an absent, default-less argument has a value of this type
    /// (`None`, an empty list); checked at compile time by [`tool_args!`].
    const MAY_BE_ABSENT: bool = false;

    /// Reads `value` (already validated against `kind`), else the default.
    fn from_arg(value: Option<&Value>, kind: &Kind) -> Self;
}

impl FromArg for String {
    fn from_arg(value: Option<&Value>, kind: &Kind) -> Self {
        let default = match kind {
            Kind::Str { default, .. } => *default,
            _ => None,
        };
        value
            .and_then(Value::as_str)
            .or(default)
            .unwrap_or_default()
            .to_owned()
    }
}

impl FromArg for u64 {
    fn from_arg(value: Option<&Value>, kind: &Kind) -> Self {
        let default = match kind {
            Kind::Int { default, .. } => *default,
            _ => None,
        };
        value
            .and_then(Value::as_u64)
            .or(default)
            .unwrap_or_default()
    }
}

impl FromArg for usize {
    /// Saturating on targets where `usize` is narrower than the bound.
    fn from_arg(value: Option<&Value>, kind: &Kind) -> Self {
        usize::try_from(u64::from_arg(value, kind)).unwrap_or(usize::MAX)
    }
}

impl FromArg for u32 {
    /// Saturating; every `u32` argument's maximum is far below `u32::MAX`.
    fn from_arg(value: Option<&Value>, kind: &Kind) -> Self {
        u32::try_from(u64::from_arg(value, kind)).unwrap_or(u32::MAX)
    }
}

impl FromArg for bool {
    fn from_arg(value: Option<&Value>, kind: &Kind) -> Self {
        let default = match kind {
            Kind::Bool { default } => *default,
            _ => None,
        };
        value
            .and_then(Value::as_bool)
            .or(default)
            .unwrap_or_default()
    }
}

impl FromArg for Vec<String> {
    const MAY_BE_ABSENT: bool = true;

    fn from_arg(value: Option<&Value>, _: &Kind) -> Self {
        value
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// An array of objects (`changes`), as given.
impl FromArg for Vec<Value> {
    const MAY_BE_ABSENT: bool = true;

    fn from_arg(value: Option<&Value>, _: &Kind) -> Self {
        value.and_then(Value::as_array).cloned().unwrap_or_default()
    }
}

/// An object argument (`env`, `arguments`), in the order given.
impl FromArg for Map<String, Value> {
    const MAY_BE_ABSENT: bool = true;

    fn from_arg(value: Option<&Value>, _: &Kind) -> Self {
        value
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }
}

impl<T: FromArg> FromArg for Option<T> {
    const MAY_BE_ABSENT: bool = true;

    fn from_arg(value: Option<&Value>, kind: &Kind) -> Self {
        value.map(|v| T::from_arg(Some(v), kind))
    }
}

/// A tool's typed arguments, built from its validated map.
pub trait ToolArgs: Sized {
    /// The input properties, in `inputSchema` order.
    const PARAMS: &'static [Param];

    /// Builds the arguments from a map [`validate`] accepted.
    fn from_map(map: &Map<String, Value>) -> Self;
}

/// A field's wire name: its identifier without the `r#` of a raw one.
pub const fn field_name(ident: &'static str) -> &'static str {
    match ident.as_bytes() {
        [b'r', b'#', rest @ ..] => match std::str::from_utf8(rest) {
            Ok(name) => name,
            Err(_) => panic!("identifiers are UTF-8"),
        },
        _ => ident,
    }
}

/// Declares a tool's arguments once: each field names its property, its
/// Rust type and its catalog declaration (kind, default, bounds and
/// description). From that come the struct, its `PARAMS` (the input
/// schema), [`ToolArgs::from_map`], and a compile-time check that every
/// optional non-`Option` field has a default.
macro_rules! tool_args {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty = $decl:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        $vis struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        $(
            const _: () = assert!(
                <$ty as $crate::args::FromArg>::MAY_BE_ABSENT
                    || $decl.required
                    || $decl.kind.has_default(),
                concat!(
                    stringify!($name), ".", stringify!($field),
                    " is optional, not an Option and has no default"
                ),
            );
        )*

        impl $crate::args::ToolArgs for $name {
            const PARAMS: &'static [$crate::catalog::Param] = &[
                $( $decl.named($crate::args::field_name(stringify!($field))), )*
            ];

            #[allow(unused_variables, reason = "tools without arguments ignore the map")]
            fn from_map(map: &serde_json::Map<String, serde_json::Value>) -> Self {
                Self {
                    $( $field: <$ty as $crate::args::FromArg>::from_arg(
                        map.get($crate::args::field_name(stringify!($field))),
                        &$decl.kind,
                    ), )*
                }
            }
        }
    };
}
pub(crate) use tool_args;

/// Declares a string argument with a fixed set of values as an enum: the
/// variants and their wire names are written once, and `NAMES` is the
/// schema's `enum`.
macro_rules! choice_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        $vis enum $name { $( $(#[$vmeta])* $variant, )+ }

        impl $name {
            /// The wire names, in declaration order.
            pub const NAMES: &'static [&'static str] = &[ $( $wire ),+ ];

            /// The wire name.
            #[allow(dead_code, reason = "not every choice is rendered back")]
            pub const fn as_str(self) -> &'static str {
                match self { $( Self::$variant => $wire, )+ }
            }

            fn from_wire(s: &str) -> Option<Self> {
                match s { $( $wire => Some(Self::$variant), )+ _ => None }
            }
        }

        impl $crate::args::FromArg for $name {
            fn from_arg(
                value: Option<&serde_json::Value>,
                kind: &$crate::catalog::Kind,
            ) -> Self {
                let given = <String as $crate::args::FromArg>::from_arg(value, kind);
                // Validation admitted only the names; the first variant
                // stands in for the impossible rest.
                Self::from_wire(&given).unwrap_or([$( Self::$variant ),+][0])
            }
        }
    };
}
pub(crate) use choice_enum;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::find;

    fn read_file(args: Value) -> Result<Map<String, Value>, ToolError> {
        validate(
            find("read_file", crate::catalog::Served::ALL_V03).unwrap(),
            Some(&args),
        )
    }

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn integral_floats_are_integers() {
        let out = read_file(parse(
            r#"{"path":"a","start_line":12.0,"max_bytes":30000.0}"#,
        ))
        .unwrap();
        assert_eq!(serde_json::to_string(&out["start_line"]).unwrap(), "12");
        assert_eq!(serde_json::to_string(&out["max_bytes"]).unwrap(), "30000");
    }

    #[test]
    fn max_safe_integer_decodes_exactly() {
        for text in [
            "9007199254740991",
            "9007199254740991.0",
            "9.007199254740991e15",
        ] {
            assert_eq!(
                integral("x", &parse(text)).unwrap(),
                9_007_199_254_740_991,
                "{text}"
            );
        }
        for text in ["9007199254740992", "9007199254740992.0", "1e300", "1e400"] {
            assert!(integral("x", &parse(text)).is_err(), "{text}");
        }
    }

    #[test]
    fn literals_are_read_exactly_not_through_a_float() {
        for (text, want) in [
            ("0", Some(0)),
            ("-0", Some(0)),
            ("-0.0e7", Some(0)),
            ("12", Some(12)),
            ("12.0", Some(12)),
            ("1.2e1", Some(12)),
            ("1200E-2", Some(12)),
            ("0.12e+2", Some(12)),
            ("30000.000", Some(30_000)),
            ("9.007199254740991e15", Some(9_007_199_254_740_991)),
            ("1.00000000000000000001", None),
            ("4503599627370496.5", None),
            ("12e-1", None),
            ("1e-99999999999999999999", None),
            ("1e99999999999999999999", None),
            ("-1", None),
        ] {
            assert_eq!(integral("x", &parse(text)).ok(), want, "{text}");
        }
        assert_eq!(exact_decimal("1e99999999999999999999"), Decimal::Huge);
        assert_eq!(exact_decimal("1e-99999999999999999999"), Decimal::Fraction);
        assert_eq!(exact_decimal("4503599627370496.5"), Decimal::Fraction);
        assert_eq!(exact_decimal("-3e2"), Decimal::Negative);
        assert_eq!(exact_decimal("12345678901234567"), Decimal::Huge);
        assert_eq!(exact_decimal("1.5.2"), Decimal::Malformed);
        assert_eq!(exact_decimal(""), Decimal::Malformed);
    }

    #[test]
    fn refusals() {
        for bad in [
            r#"{"path":"a","start_line":1.5}"#,
            r#"{"path":"a","start_line":"10"}"#,
            r#"{"path":"a","start_line":true}"#,
            r#"{"path":"a","start_line":-1}"#,
            r#"{"path":"a","start_line":-1.0}"#,
            r#"{"path":"a","start_line":0}"#,
            r#"{"path":"a","max_bytes":1048577}"#,
            r#"{"path":""}"#,
            r#"{"path":null}"#,
            r#"{}"#,
            r#"{"path":"a","encoding":"latin-1"}"#,
            r#"{"path":"a","strat_line":2}"#,
            r#"{"path":7}"#,
        ] {
            let e = read_file(parse(bad)).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad}");
            assert!(!e.retryable);
        }
    }

    #[test]
    fn unknown_arguments_are_named() {
        let e = read_file(parse(r#"{"path":"a","zeta":1,"alpha":2}"#)).unwrap_err();
        assert_eq!(e.details["unknown"], json!(["alpha", "zeta"]));
        assert!(e.message.contains("alpha, zeta"));
    }

    #[test]
    fn optional_null_is_absent_and_non_objects_refused() {
        let out = read_file(parse(r#"{"path":"a","end_line":null}"#)).unwrap();
        assert!(!out.contains_key("end_line"));
        let spec = find("server_info", crate::catalog::Served::ALL_V03).unwrap();
        assert!(validate(spec, None).unwrap().is_empty());
        assert!(validate(spec, Some(&json!([]))).is_err());
    }

    #[test]
    fn typed_collections() {
        let spec = find("exec_command", crate::catalog::Served::ALL_V03).unwrap();
        assert!(validate(spec, Some(&json!({"cmd":"x","env":{"A":"1"}}))).is_ok());
        assert!(validate(spec, Some(&json!({"cmd":"x","env":{"A":1}}))).is_err());
        let spec = find("list_files", crate::catalog::Served::ALL_V03).unwrap();
        assert!(validate(spec, Some(&json!({"patterns":["*.rs"]}))).is_ok());
        assert!(validate(spec, Some(&json!({"patterns":"*.rs"}))).is_err());
    }
}
