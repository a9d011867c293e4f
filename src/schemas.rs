//! The JSON Schemas shipped with budgetd, embedded and compiled once.

use std::sync::LazyLock;

use serde_json::{json, Value};

/// `(name, text)` of every schema, served at `/schemas/{name}.json`.
pub const SCHEMAS: [(&str, &str); 3] = [
    ("topology", include_str!("../schemas/topology.json")),
    ("run", include_str!("../schemas/run.json")),
    ("baseline", include_str!("../schemas/baseline.json")),
];

/// The OpenAPI document of the HTTP API, served at `/openapi.json`.
pub const OPENAPI: &str = include_str!("../schemas/openapi.json");

pub fn text(name: &str) -> Option<&'static str> {
    SCHEMAS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

fn compile(name: &str) -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(text(name).expect("schema is embedded"))
        .expect("embedded schema is JSON");
    jsonschema::validator_for(&schema).expect("embedded schema compiles")
}

static TOPOLOGY: LazyLock<jsonschema::Validator> = LazyLock::new(|| compile("topology"));
static RUN: LazyLock<jsonschema::Validator> = LazyLock::new(|| compile("run"));
static BASELINE: LazyLock<jsonschema::Validator> = LazyLock::new(|| compile("baseline"));

#[derive(Debug, Clone, Copy)]
pub enum Schema {
    Topology,
    Run,
    Baseline,
}

impl Schema {
    fn validator(self) -> &'static jsonschema::Validator {
        match self {
            Self::Topology => &TOPOLOGY,
            Self::Run => &RUN,
            Self::Baseline => &BASELINE,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Topology => "topology",
            Self::Run => "run",
            Self::Baseline => "baseline",
        }
    }

    /// The first [`LISTED`] violations as `{"pointer", "message"}` (empty when `instance` is
    /// valid), each message at most [`MESSAGE_CHARS`] characters.
    pub fn violations(self, instance: &Value) -> Vec<Value> {
        self.check(instance).0
    }

    /// The first [`LISTED`] violations, as [`Self::violations`], and how many there are; of a
    /// document of more than [`LISTED_VALUES`] values, the first violation alone, and `None`
    /// for the count. The validator gathers every violation before it gives the first (about
    /// 400 bytes each, and an object missing four fields has four), so a body of a few MB
    /// could make it gather millions: a document that large is checked up to its first.
    pub fn check(self, instance: &Value) -> (Vec<Value>, Option<usize>) {
        let validator = self.validator();
        if validator.is_valid(instance) {
            return (Vec::new(), Some(0));
        }
        let listed = |e: jsonschema::ValidationError<'_>| {
            let pointer = e.instance_path().as_str().to_owned();
            json!({"pointer": pointer, "message": shortened(e.to_string())})
        };
        if values_over(instance, LISTED_VALUES) {
            let first = validator.validate(instance).err().map(listed);
            return (first.into_iter().collect(), None);
        }
        let mut errors = validator.iter_errors(instance);
        let first: Vec<Value> = errors.by_ref().take(LISTED).map(listed).collect();
        let total = first.len() + errors.count();
        (first, Some(total))
    }
}

/// Whether `value` holds more than `most` values, itself and those in it at any depth.
fn values_over(value: &Value, most: usize) -> bool {
    let mut left = most;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        let Some(fewer) = left.checked_sub(1) else {
            return true;
        };
        left = fewer;
        let inner = match v {
            Value::Array(items) => items.len(),
            Value::Object(members) => members.len(),
            _ => 0,
        };
        if inner > left {
            return true;
        }
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(members) => stack.extend(members.values()),
            _ => {}
        }
    }
    false
}

/// The values of a document whose violations are all gathered; past it, only the first.
pub const LISTED_VALUES: usize = 20_000;

/// The violations an answer lists at most.
pub const LISTED: usize = 100;

/// The characters a violation's message keeps at most.
pub const MESSAGE_CHARS: usize = 500;

fn shortened(message: String) -> String {
    match message.char_indices().nth(MESSAGE_CHARS) {
        Some((end, _)) => format!("{}…", &message[..end]),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_compiles_and_examples_validate() {
        for s in [Schema::Topology, Schema::Run, Schema::Baseline] {
            let _ = s.validator();
        }
        for (schema, doc) in [
            (Schema::Topology, budget_core::example::CHECKOUT_TOPOLOGY),
            (Schema::Topology, budget_core::example::CHECKOUT_TOPOLOGY_B),
            (Schema::Run, budget_core::example::CHECKOUT_RUN_A),
            (Schema::Run, budget_core::example::CHECKOUT_RUN_C),
        ] {
            let v: Value = serde_json::from_str(doc).unwrap();
            assert_eq!(schema.violations(&v), Vec::<Value>::new());
        }
    }

    #[test]
    fn violations_carry_pointers() {
        let v = json!({"entry_budget_ms": "800", "segments": [{"id": "a->b", "caller": "a", "callee": "b", "class": "wobbly", "extra": 1}]});
        let errs = Schema::Topology.violations(&v);
        let pointers: Vec<&str> = errs
            .iter()
            .map(|e| e["pointer"].as_str().unwrap())
            .collect();
        assert!(pointers.contains(&"/entry_budget_ms"), "{errs:?}");
        assert!(pointers.contains(&"/segments/0/class"), "{errs:?}");
        assert!(pointers.contains(&"/segments/0"), "{errs:?}");
    }
}
