//! Tool results as typed structs, and the `outputSchema` each tool
//! advertises, derived from the same declaration.
//!
//! A result struct is declared with [`tool_result!`]: it serializes with
//! serde in field order, and its [`Shape`] (a JSON Schema) lists every field
//! with its type; fields that are not `Option` are required on success.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value, json};

/// The JSON Schema of a value of this type.
pub trait Shape {
    /// Whether the field may be null or absent (`Option`).
    const OPTIONAL: bool = false;

    /// The schema.
    fn shape() -> Value;

    /// [`Self::shape`] reduced to its `type` (an `anyOf`'s types united),
    /// without what nested objects and arrays hold: what a tool's
    /// `outputSchema` says of each field. Composite types answer without
    /// building their whole shape.
    fn type_only() -> Value {
        type_only(&Self::shape())
    }

    /// The `outputSchema` of a tool whose result this is ([`tool_schema`]).
    fn output_schema() -> Value {
        tool_schema(Some(Self::shape()))
    }
}

macro_rules! shape_of {
    ($json_type:literal: $($t:ty),+) => {
        $( impl Shape for $t {
            fn shape() -> Value {
                json!({ "type": $json_type })
            }
        } )+
    };
}
shape_of!("string": String, &str, WirePath);
shape_of!("integer": u64, u32, usize, i64, i32);
shape_of!("number": f64);
shape_of!("boolean": bool);

/// Any JSON value: a free-form field (an echoed argument, a nested
/// document with its own contract).
impl Shape for Value {
    fn shape() -> Value {
        json!({})
    }
}

/// An object whose members are not declared here.
impl Shape for Map<String, Value> {
    fn shape() -> Value {
        json!({ "type": "object" })
    }
}

impl<T: Shape> Shape for Vec<T> {
    fn shape() -> Value {
        json_object([("type", "array".into()), ("items", T::shape())])
    }

    fn type_only() -> Value {
        json_object([("type", "array".into())])
    }
}

/// An object of `entries`, each value moved in. (`json!` would copy every
/// value it is given through serde — a deep copy of each nested schema at
/// every level: 5 ms of the first `tools/list`.)
pub fn json_object<const N: usize>(entries: [(&str, Value); N]) -> Value {
    let mut m = Map::new();
    for (k, v) in entries {
        m.insert(k.to_owned(), v);
    }
    Value::Object(m)
}

impl<T: Shape> Shape for Option<T> {
    const OPTIONAL: bool = true;

    fn shape() -> Value {
        nullable(T::shape())
    }

    fn type_only() -> Value {
        nullable(T::type_only())
    }
}

/// A path as a result reports it: its text, with any byte that is not UTF-8
/// shown as U+FFFD (JSON strings are Unicode; a `PathBuf` that is not would
/// fail to serialize and lose the whole result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WirePath(pub PathBuf);

impl Serialize for WirePath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.to_string_lossy())
    }
}

impl From<PathBuf> for WirePath {
    fn from(p: PathBuf) -> Self {
        Self(p)
    }
}

impl From<&Path> for WirePath {
    fn from(p: &Path) -> Self {
        Self(p.to_path_buf())
    }
}

/// `schema` that also admits `null`.
fn nullable(mut schema: Value) -> Value {
    match schema.get_mut("type") {
        Some(Value::String(t)) => {
            let t = std::mem::take(t);
            schema["type"] = json!([t, "null"]);
        }
        Some(Value::Array(types)) if !types.contains(&json!("null")) => {
            types.push(json!("null"));
        }
        _ => {
            if let Some(Value::Array(choices)) = schema.get_mut("anyOf") {
                choices.push(json!({"type": "null"}));
            }
        }
    }
    schema
}

/// A value that matches one of `schemas` (the shape of an untagged enum).
pub fn any_of(schemas: Vec<Value>) -> Value {
    json_object([("anyOf", Value::Array(schemas))])
}

/// The schema of a result struct: its fields' schemas, and the fields a
/// success always carries.
pub fn object(fields: Vec<(&'static str, Value, bool)>) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, schema, optional) in fields {
        if !optional {
            required.push(Value::String(name.to_owned()));
        }
        properties.insert(name.to_owned(), schema);
    }
    let mut schema = json_object([
        ("type", "object".into()),
        ("properties", Value::Object(properties)),
    ]);
    // No required field: no `required` (the same schema, shorter).
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    schema
}

/// Declares a result struct once: serde serializes it in field order and
/// [`Shape`] describes it. Raw identifiers
/// (`r#type`) give reserved words as field names; `#[serde(rename)]` is
/// not used, so the schema's names are the identifiers. A field followed by
/// `[skip_if "pred"]` is left out of the answer when `pred` holds (an empty
/// list, a `false` flag): the schema lists it as optional.
macro_rules! tool_result {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty $([skip_if $pred:literal])? ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, serde::Serialize)]
        $vis struct $name {
            $( $(#[$fmeta])* $(#[serde(skip_serializing_if = $pred)])? pub $field: $ty, )*
        }

        impl $crate::output::Shape for $name {
            fn shape() -> serde_json::Value {
                $crate::output::object(vec![
                    $( (
                        $crate::args::field_name(stringify!($field)),
                        <$ty as $crate::output::Shape>::shape(),
                        <$ty as $crate::output::Shape>::OPTIONAL $( || $crate::output::skipped($pred) )?,
                    ), )*
                ])
            }

            fn type_only() -> serde_json::Value {
                $crate::output::json_object([("type", "object".into())])
            }

            fn output_schema() -> serde_json::Value {
                // tool_schema of the whole shape, without building it.
                $crate::output::output_schema_of(vec![
                    $( (
                        $crate::args::field_name(stringify!($field)),
                        <$ty as $crate::output::Shape>::OPTIONAL $( || $crate::output::skipped($pred) )?,
                        <$ty as $crate::output::Shape>::type_only as fn() -> serde_json::Value,
                    ), )*
                ])
            }
        }
    };
}
/// For `[skip_if]`: a flag left out when it holds (its usual value).
pub fn is_true(b: &bool) -> bool {
    *b
}

/// For `[skip_if]`: a count left out when there is nothing to count.
pub fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A field with `[skip_if ...]` may be absent: optional in the schema.
pub const fn skipped(_predicate: &str) -> bool {
    true
}
pub(crate) use tool_result;

tool_result! {
    /// A call the model can make next, with its exact arguments.
    pub struct NextCall {
        tool: &'static str,
        arguments: Map<String, Value>,
    }
}

/// Renders a call as the model would write it: `tool(key=json, ...)`.
pub fn call_text(tool: &str, arguments: &Map<String, Value>) -> String {
    let args: Vec<String> = arguments.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{tool}({})", args.join(", "))
}

/// `ok` and `error`, which every tool's `outputSchema` has.
fn base_output_properties() -> Map<String, Value> {
    let mut properties = Map::new();
    properties.insert("ok".into(), json!({"type": "boolean"}));
    properties.insert(
        "error".into(),
        json!({"type": "object", "required": ["code", "message", "category", "retryable", "details"]}),
    );
    properties
}

/// A tool's `outputSchema` as `tools/list` serves it: `ok`, `error` (with
/// the fields every failure carries), and the type of each field a success
/// always carries. Fields a result carries only sometimes (a continuation,
/// a cut stream's offsets, the full report) are left to `docs/protocol.md`
/// and the object stays open, so they validate; nested objects are named
/// by their type only. The whole declaration of every field is
/// [`full_schema`] (issue 32: the listing is fetched by every client, and
/// the complete declarations made it three times the reference's).
pub fn tool_schema(result: Option<Value>) -> Value {
    let mut properties = base_output_properties();
    if let Some(result) = result
        && let (Some(Value::Object(p)), Some(Value::Array(required))) =
            (result.get("properties"), result.get("required"))
    {
        for name in required.iter().filter_map(Value::as_str) {
            if let Some(field) = p.get(name) {
                properties.insert(name.to_owned(), type_only(field));
            }
        }
    }
    json_object([
        ("type", "object".into()),
        ("properties", Value::Object(properties)),
        ("required", json!(["ok"])),
    ])
}

/// A result field as its `outputSchema` sees it: name, whether a success
/// may leave it out, and its [`Shape::type_only`].
pub type ListedField = (&'static str, bool, fn() -> Value);

/// [`tool_schema`] of a result of `fields`: the required ones, each by its
/// type alone.
pub fn output_schema_of(fields: Vec<ListedField>) -> Value {
    let mut properties = base_output_properties();
    for (name, optional, type_of) in fields {
        if !optional {
            properties.insert(name.to_owned(), type_of());
        }
    }
    json_object([
        ("type", "object".into()),
        ("properties", Value::Object(properties)),
        ("required", json!(["ok"])),
    ])
}

/// A field's schema reduced to its `type` (the union of an `anyOf`'s).
fn type_only(field: &Value) -> Value {
    let mut types: Vec<Value> = Vec::new();
    let mut add = |t: &Value| match t {
        Value::Array(ts) => ts.iter().for_each(|t| {
            if !types.contains(t) {
                types.push(t.clone());
            }
        }),
        t @ Value::String(_) if !types.contains(t) => types.push(t.clone()),
        _ => {}
    };
    if let Some(t) = field.get("type") {
        add(t);
    }
    for choice in field
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(t) = choice.get("type") {
            add(t);
        }
    }
    match types.len() {
        0 => json!({}),
        1 => json_object([("type", types.remove(0))]),
        _ => json_object([("type", Value::Array(types))]),
    }
}

/// A tool's complete result declaration: `ok`, `error` on failure, and
/// every field of the result with its whole schema, which a success
/// (`ok: true`) always carries when required. The black-box tests check
/// every answer against it; `docs/protocol.md` lists it.
pub fn full_schema(result: Option<Value>) -> Value {
    let mut properties = Map::new();
    properties.insert("ok".into(), json!({"type": "boolean"}));
    properties.insert("error".into(), error_schema());
    // Open (JSON Schema's default): a failure may carry fields of its own,
    // such as `status`.
    let mut schema = json!({
        "type": "object",
        "properties": {},
        "required": ["ok"],
    });
    if let Some(result) = result {
        if let Some(Value::Object(p)) = result.get("properties") {
            for (k, v) in p {
                properties.insert(k.clone(), v.clone());
            }
        }
        schema["if"] = json!({"properties": {"ok": {"const": true}}});
        if let Some(required) = result.get("required") {
            schema["then"] = json_object([("required", required.clone())]);
        }
        // A failure always says why.
        schema["else"] = json!({"required": ["error"]});
    }
    schema["properties"] = Value::Object(properties);
    schema
}

fn error_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "code": {"type": "string"},
            "message": {"type": "string"},
            "category": {"type": "string", "enum": ["validation", "security", "permission", "runtime", "not_found", "conflict", "internal"]},
            "retryable": {"type": "boolean"},
            "details": {"type": "object"},
        },
        "required": ["code", "message", "category", "retryable", "details"],
    })
}

/// A result struct as the `structuredContent` map it becomes.
pub fn to_map(result: &impl Serialize) -> Map<String, Value> {
    match serde_json::to_value(result) {
        Ok(Value::Object(m)) => m,
        // Result structs are structs of strings, numbers, lists and maps
        // with string keys: serializing them cannot fail.
        other => {
            debug_assert!(false, "a result struct serialized to {other:?}");
            Map::new()
        }
    }
}
