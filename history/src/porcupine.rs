//! Porcupine's test histories, read as Porcupine's own tests read them
//! (`porcupine_test.go`, github.com/anishathalye/porcupine, MIT): the Jepsen etcd logs
//! (a compare-and-set register) and the key-value logs (get, put, append on string keys,
//! partitioned by key). The checker is judged against Porcupine's verdicts on them:
//! `harness/tests/data/porcupine/expected.txt`, `tests/linearizability.rs` and
//! `load-test porcupine`.
//!
//! Text in, events out: no files are opened here.

use std::collections::{BTreeMap, HashMap};

use super::linearizability::{Budget, Event, Linearizable, Model, check_events};
use super::models::CasRegister;
use super::models::{RegisterInput, RegisterOutput};

/// The events of a Jepsen etcd log (`INFO jepsen.util - 3 :invoke :cas [1 4]`). As in
/// Porcupine's `parseJepsenLog`: a read that timed out (`:fail :read :timed-out`) returns
/// `unknown` where it timed out; a call with no return (`:info … :timed-out`) returns
/// `unknown` at the end; other lines are skipped. Errors: a return with no call.
pub fn etcd_events(log: &str) -> Result<Vec<Event<RegisterInput, RegisterOutput>>, String> {
    let mut events = Vec::new();
    let mut pending: BTreeMap<String, usize> = BTreeMap::new();
    let mut next_id = 0;
    for (n, line) in log.lines().enumerate() {
        let Some(rest) = line.strip_prefix("INFO") else {
            continue;
        };
        let Some((_, rest)) = rest.split_once("jepsen.util - ") else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let [process, kind, f, args @ ..] = fields.as_slice() else {
            continue;
        };
        let numbers: Vec<i64> = args
            .iter()
            .map(|a| a.trim_matches(['[', ']']))
            .filter_map(|a| a.parse().ok())
            .collect();
        let call = match (*kind, *f, numbers.as_slice(), args) {
            (":invoke", ":read", [], ["nil"]) => Some(RegisterInput::Read),
            (":invoke", ":write", [v], _) => Some(RegisterInput::Write(*v)),
            (":invoke", ":cas", [a, b], _) => Some(RegisterInput::Cas(*a, *b)),
            _ => None,
        };
        if let Some(input) = call {
            pending.insert(process.to_string(), next_id);
            events.push(Event::Call {
                id: next_id,
                process: process.to_string(),
                input,
            });
            next_id += 1;
            continue;
        }
        let output = match (*kind, *f, numbers.as_slice(), args) {
            (":ok", ":read", [], ["nil"]) => RegisterOutput::Read(None),
            (":ok", ":read", [v], _) => RegisterOutput::Read(Some(*v)),
            (":ok", ":write", [_], _) => RegisterOutput::Done,
            (":ok", ":cas", [_, _], _) => RegisterOutput::Cas(true),
            (":fail", ":cas", [_, _], _) => RegisterOutput::Cas(false),
            (":fail", ":read", [], [":timed-out"]) => RegisterOutput::Unknown,
            _ => continue,
        };
        let id = pending
            .remove(*process)
            .ok_or_else(|| format!("line {}: a return with no call", n + 1))?;
        events.push(Event::Return { id, output });
    }
    for id in pending.into_values() {
        events.push(Event::Return {
            id,
            output: RegisterOutput::Unknown,
        });
    }
    Ok(events)
}

/// One key's string, with get, put and append (Porcupine's `kvModel`).
#[derive(Debug, Clone, Copy, Default)]
pub struct KvModel;

/// What a key-value operation asks (the key is the partition's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvInput {
    /// Read the value.
    Get,
    /// Set the value.
    Put(String),
    /// Add to the end of the value.
    Append(String),
}

impl Model for KvModel {
    type State = String;
    type Input = KvInput;
    /// A get's value; empty for a put or an append.
    type Output = String;

    fn init(&self) -> String {
        String::new()
    }

    fn step(&self, state: &String, input: &KvInput, output: &String) -> Option<String> {
        match input {
            KvInput::Get => (output == state).then(|| state.clone()),
            KvInput::Put(v) => Some(v.clone()),
            KvInput::Append(v) => Some(format!("{state}{v}")),
        }
    }

    fn describe(&self, input: &KvInput, output: &String) -> String {
        match input {
            KvInput::Get => format!("get() -> '{output}'"),
            KvInput::Put(v) => format!("put('{v}')"),
            KvInput::Append(v) => format!("append('{v}')"),
        }
    }

    fn describe_state(&self, state: &String) -> String {
        format!("'{state}'")
    }
}

/// The events of a key-value log (`{:process 0, :type :invoke, :f :get, :key "5", :value
/// nil}`), one list per key (P-compositionality), as Porcupine's `parseKvLog` and
/// `kvModel.PartitionEvent` read them: a call with no return returns an empty output
/// at the end. Errors: a line that is not an event, a return with no call.
pub fn kv_partitions(log: &str) -> Result<BTreeMap<String, Vec<Event<KvInput, String>>>, String> {
    let mut partitions: BTreeMap<String, Vec<Event<KvInput, String>>> = BTreeMap::new();
    let mut pending: HashMap<String, (usize, String)> = HashMap::new();
    let mut next_id = 0;
    for (n, line) in log.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let field = |name: &str| -> Option<&str> {
            let start = line.find(&format!(":{name} "))? + name.len() + 2;
            let rest = &line[start..];
            Some(match rest.strip_prefix('"') {
                Some(quoted) => &quoted[..quoted.find('"')?],
                None => rest.split([',', '}']).next()?,
            })
        };
        let bad = || format!("line {}: not an event: {line}", n + 1);
        let (process, kind, f, key) =
            match (field("process"), field("type"), field("f"), field("key")) {
                (Some(p), Some(t), Some(f), Some(k)) => (p, t, f, k),
                _ => return Err(bad()),
            };
        let value = field("value").unwrap_or("nil");
        match kind {
            ":invoke" => {
                let id = next_id;
                next_id += 1;
                let input = match f {
                    ":get" => KvInput::Get,
                    ":put" => KvInput::Put(value.into()),
                    ":append" => KvInput::Append(value.into()),
                    _ => return Err(bad()),
                };
                pending.insert(process.into(), (id, key.into()));
                partitions.entry(key.into()).or_default().push(Event::Call {
                    id,
                    process: process.into(),
                    input,
                });
            }
            ":ok" => {
                let (id, key) = pending
                    .remove(process)
                    .ok_or_else(|| format!("line {}: a return with no call", n + 1))?;
                let output = if f == ":get" {
                    value.to_string()
                } else {
                    String::new()
                };
                partitions
                    .entry(key)
                    .or_default()
                    .push(Event::Return { id, output });
            }
            _ => {}
        }
    }
    for (_, (id, key)) in pending {
        partitions.entry(key).or_default().push(Event::Return {
            id,
            output: String::new(),
        });
    }
    Ok(partitions)
}

/// Checks one of Porcupine's logs, `name` its path under the data folder (`jepsen/…`: an
/// etcd log against [`CasRegister`]; `kv/…`: a key-value log against [`KvModel`], key by
/// key, stopping at the first that is not), each search within `budget`. Returns the
/// verdict and the steps taken (those of searches restarted with a larger budget too).
/// Errors:
/// a log that does not parse, a name of neither kind.
pub fn check_log(name: &str, log: &str, budget: Budget) -> Result<(Linearizable, u64), String> {
    if name.starts_with("jepsen/") {
        let search = check_events(&CasRegister, &etcd_events(log)?, budget)?;
        return Ok((search.verdict, search.steps));
    }
    if !name.starts_with("kv/") {
        return Err(format!("{name}: neither jepsen/ nor kv/"));
    }
    // One key not linearizable decides the log: Porcupine searches the keys at once and
    // stops at the first that fails. Here, one after another within a budget doubled
    // round by round, so a key that fails fast is not kept waiting behind a slow one.
    let partitions = kv_partitions(log)?;
    let mut open: Vec<&Vec<Event<KvInput, String>>> = partitions.values().collect();
    let mut round = Budget {
        max_steps: 10_000.min(budget.max_steps),
        ..budget
    };
    let mut steps = 0;
    loop {
        let mut undecided = Vec::new();
        for events in open {
            let search = check_events(&KvModel, events, round)?;
            steps += search.steps;
            match search.verdict {
                Linearizable::False => return Ok((Linearizable::False, steps)),
                Linearizable::Unknown => undecided.push(events),
                Linearizable::True => {}
            }
        }
        if undecided.is_empty() {
            return Ok((Linearizable::True, steps));
        }
        if round.max_steps >= budget.max_steps {
            return Ok((Linearizable::Unknown, steps));
        }
        round.max_steps = (round.max_steps * 2).min(budget.max_steps);
        open = undecided;
    }
}

/// Porcupine's verdicts, from `expected.txt`: one `path true|false` per line (`#`
/// starts a comment). Errors: a line of another shape.
pub fn expected(text: &str) -> Result<Vec<(String, bool)>, String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .map(
            |l| match l.split_whitespace().collect::<Vec<_>>().as_slice() {
                [path, "true"] => Ok((path.to_string(), true)),
                [path, "false"] => Ok((path.to_string(), false)),
                _ => Err(format!("not `path true|false`: {l}")),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etcd_log_reads_as_porcupine_reads_it() {
        let log = "INFO  jepsen.util - 0\t:invoke\t:read\tnil\n\
                   INFO  jepsen.util - 1\t:invoke\t:cas\t[3 0]\n\
                   INFO  jepsen.util - 2\t:invoke\t:write\t4\n\
                   INFO  jepsen.util - 0\t:ok\t:read\t3\n\
                   INFO  jepsen.util - 1\t:fail\t:cas\t[3 0]\n\
                   INFO  jepsen.util - 2\t:info\t:write\t:timed-out\n\
                   INFO  jepsen.core - nemesis something\n";
        let events = etcd_events(log).unwrap();
        assert_eq!(events.len(), 6);
        assert_eq!(
            events[3],
            Event::Return {
                id: 0,
                output: RegisterOutput::Read(Some(3))
            }
        );
        assert_eq!(
            events[4],
            Event::Return {
                id: 1,
                output: RegisterOutput::Cas(false)
            }
        );
        assert_eq!(
            events[5],
            Event::Return {
                id: 2,
                output: RegisterOutput::Unknown
            }
        );
    }

    #[test]
    fn a_kv_log_reads_one_partition_per_key() {
        let log = "{:process 0, :type :invoke, :f :append, :key \"0\", :value \"x 0 0 y\"}\n\
                   {:process 1, :type :invoke, :f :get, :key \"4\", :value nil}\n\
                   {:process 0, :type :ok, :f :append, :key \"0\", :value \"x 0 0 y\"}\n\
                   {:process 1, :type :ok, :f :get, :key \"4\", :value \"\"}\n";
        let partitions = kv_partitions(log).unwrap();
        assert_eq!(partitions.len(), 2);
        assert_eq!(
            partitions["0"][0],
            Event::Call {
                id: 0,
                process: "0".into(),
                input: KvInput::Append("x 0 0 y".into())
            }
        );
        assert_eq!(
            partitions["4"][1],
            Event::Return {
                id: 1,
                output: String::new()
            }
        );
        assert!(kv_partitions("nonsense").is_err());
    }

    #[test]
    fn expected_verdicts_are_one_per_line() {
        let text = "# Porcupine's\njepsen/etcd_000.log false\nkv/c01-ok.txt true\n";
        assert_eq!(
            expected(text).unwrap(),
            [
                ("jepsen/etcd_000.log".to_string(), false),
                ("kv/c01-ok.txt".to_string(), true)
            ]
        );
        assert!(expected("x maybe").is_err());
    }
}
