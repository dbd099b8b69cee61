//! A linearizability checker: the Wing–Gong–Lowe search with Lowe's memo, as Porcupine
//! does it (Lowe, "Testing for linearizability", 2017; Horn and Kroening, "Faster
//! linearizability checking via P-compositionality", 2015).
//!
//! A history is linearizable against a sequential [`Model`] when its operations can be
//! put in one order that respects real time (an operation that returned before another
//! was called comes first) and in which every operation's output is what the model gives.
//! The search walks the history's calls and returns as one list: it linearizes the first
//! call it can (the model accepts its output in the current state), takes it out of the
//! list, and starts again from the head; when it meets a return whose call is not yet
//! linearized, no order of what came before works, so it undoes the last choice and
//! tries the next call. Lowe's memo makes it fast: a (set of linearized operations, model
//! state) pair seen once is never explored twice, since what can follow depends on
//! nothing else.
//!
//! An operation whose outcome is unknown (a timeout, a lost answer) returns at the end of
//! the history (Porcupine's and Knossos's way): it may take effect at any time after its
//! call, or, placed after every observation, never.
//!
//! The search is bounded by a [`Budget`] of steps; a history it could not finish within it
//! is [`Linearizable::Unknown`], never a pass. The module does no I/O: histories come in
//! as data, a verdict goes out.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};

use serde::Serialize;

/// A sequential specification: what one object (a register, a seat's row) answers.
pub trait Model {
    /// The object's state. Two equal states must behave alike (the memo relies on it).
    type State: Clone + Eq + Hash;
    /// What an operation asks.
    type Input;
    /// What an operation was answered.
    type Output;

    /// The state before any operation.
    fn init(&self) -> Self::State;

    /// The state after `input` answered with `output` in `state`, or `None` when the
    /// model could not have answered so.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: &Self::Output,
    ) -> Option<Self::State>;

    /// One operation in words, for a report: `cas(1, 4) -> ok`.
    fn describe(&self, input: &Self::Input, output: &Self::Output) -> String;

    /// A state in words, for a report.
    fn describe_state(&self, state: &Self::State) -> String;

    /// The bytes a state holds on the heap, beyond its own size: what the memo's copy of
    /// it costs ([`Budget::max_memo_bytes`]). 0 for a state with nothing on the heap.
    fn state_heap_bytes(&self, _state: &Self::State) -> usize {
        0
    }
}

/// One operation with its call and return times (any unit, one clock); an unknown
/// outcome returns at `f64::INFINITY`.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation<I, O> {
    /// Who called it (reports only: the search needs real time, not processes).
    pub process: String,
    /// What it asked.
    pub input: I,
    /// What it was answered.
    pub output: O,
    /// When it was called.
    pub call: f64,
    /// When it returned.
    pub ret: f64,
}

/// A history as a sequence of events, Jepsen's logs' shape: calls and returns in the
/// order they happened, a return naming its call by `id`.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<I, O> {
    /// An operation called, with the id its return will carry.
    Call {
        /// The operation's id, unique in the history.
        id: usize,
        /// Who called it.
        process: String,
        /// What it asked.
        input: I,
    },
    /// An operation's return.
    Return {
        /// The id of its call.
        id: usize,
        /// What it was answered.
        output: O,
    },
}

/// How far a search may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The most steps (a call tried, or a choice undone) one partition's search may take.
    pub max_steps: u64,
    /// The most bytes one partition's memo may hold (its linearized sets and states): a
    /// history of many concurrent writes can fill memory long before its steps run out.
    pub max_memo_bytes: usize,
}

impl Budget {
    /// Two million steps: a 180 s nemesis seat or item takes a few thousand; a Jepsen
    /// etcd log of Porcupine's at most a few hundred thousand. 256 MiB of memo.
    pub const DEFAULT: Budget = Budget {
        max_steps: 2_000_000,
        max_memo_bytes: 256 << 20,
    };

    /// [`Budget::DEFAULT`] with at most `max_steps` steps.
    pub fn steps(max_steps: u64) -> Budget {
        Budget {
            max_steps,
            ..Budget::DEFAULT
        }
    }
}

/// The verdict on a history: `true`, `false`, or `unknown` when the budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Linearizable {
    /// An order was found.
    True,
    /// No order exists.
    False,
    /// The search ran out of budget before deciding.
    Unknown,
}

impl Linearizable {
    /// `true`, `false` or `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            Linearizable::True => "true",
            Linearizable::False => "false",
            Linearizable::Unknown => "unknown",
        }
    }

    /// The verdict on several partitions checked apart (P-compositionality): `false` if
    /// one is, else `unknown` if one is, else `true`.
    pub fn all(verdicts: impl IntoIterator<Item = Linearizable>) -> Linearizable {
        verdicts
            .into_iter()
            .fold(Linearizable::True, |acc, v| match (acc, v) {
                (Linearizable::False, _) | (_, Linearizable::False) => Linearizable::False,
                (Linearizable::Unknown, _) | (_, Linearizable::Unknown) => Linearizable::Unknown,
                _ => Linearizable::True,
            })
    }
}

/// The result of one search.
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    /// The verdict.
    pub verdict: Linearizable,
    /// Steps taken (calls tried plus choices undone): the search's cost, machine-free.
    pub steps: u64,
    /// A linearization when one was found; else the longest partial one the search
    /// reached: indices into the operations, in linearization order.
    pub linearization: Vec<usize>,
}

/// Checks `operations` against `model` within `budget`. A history with a time that is
/// not a number, or an operation that returns before its call, cannot be judged: it is
/// [`Linearizable::Unknown`], never a pass.
pub fn check_operations<M: Model>(
    model: &M,
    operations: &[Operation<M::Input, M::Output>],
    budget: Budget,
) -> Search {
    if operations
        .iter()
        .any(|op| op.call.is_nan() || op.ret.is_nan() || op.ret < op.call)
    {
        return Search {
            verdict: Linearizable::Unknown,
            steps: 0,
            linearization: Vec::new(),
        };
    }
    // Calls and returns by time; at a tie the call first, so operations that touch are
    // taken as concurrent (the lenient reading, Porcupine's).
    let mut events: Vec<(f64, bool, usize)> = Vec::with_capacity(operations.len() * 2);
    for (i, op) in operations.iter().enumerate() {
        events.push((op.call, false, i));
        events.push((op.ret, true, i));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let order: Vec<(bool, usize)> = events.into_iter().map(|(_, r, i)| (r, i)).collect();
    search(
        model,
        &order,
        |i| &operations[i].input,
        |i| &operations[i].output,
        operations.len(),
        budget,
    )
}

/// Checks a history given as `events` against `model` within `budget`. A call with no
/// return is an error, as is an id called twice or returned before its call. The
/// linearization's indices are the calls' positions among the calls (0 for the first).
pub fn check_events<M: Model>(
    model: &M,
    events: &[Event<M::Input, M::Output>],
    budget: Budget,
) -> Result<Search, String> {
    let mut slot = std::collections::HashMap::new();
    let mut inputs = Vec::new();
    let mut outputs: Vec<Option<&M::Output>> = Vec::new();
    let mut order = Vec::with_capacity(events.len());
    for event in events {
        match event {
            Event::Call { id, input, .. } => {
                if slot.insert(*id, inputs.len()).is_some() {
                    return Err(format!("operation {id} is called twice"));
                }
                order.push((false, inputs.len()));
                inputs.push(input);
                outputs.push(None);
            }
            Event::Return { id, output } => {
                let at = *slot
                    .get(id)
                    .ok_or_else(|| format!("operation {id} returns before its call"))?;
                if outputs[at].replace(output).is_some() {
                    return Err(format!("operation {id} returns twice"));
                }
                order.push((true, at));
            }
        }
    }
    let outputs: Vec<&M::Output> = outputs
        .into_iter()
        .enumerate()
        .map(|(i, o)| o.ok_or_else(|| format!("the call at position {i} never returns")))
        .collect::<Result<_, _>>()?;
    Ok(search(
        model,
        &order,
        |i| inputs[i],
        |i| outputs[i],
        inputs.len(),
        budget,
    ))
}

/// No node: the end of the list.
const NONE: usize = usize::MAX;

/// A node of the search's doubly linked list of calls and returns.
#[derive(Debug, Clone, Copy)]
struct Node {
    /// The operation's index.
    op: usize,
    /// For a call, its return's node; `NONE` for a return.
    ret: usize,
    prev: usize,
    next: usize,
}

/// The set of operations linearized so far, one bit each (the memo's half of a key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// Lowe's memo: the (linearized set, state) pairs seen. Keyed by their hash, compared by
/// reference, so a pair seen before costs no copy (Porcupine's buckets).
struct Memo<S> {
    hasher: RandomState,
    seen: HashMap<u64, Vec<(Bits, S)>>,
    /// What the pairs take, about: their sizes and their heap.
    bytes: usize,
}

impl<S> Default for Memo<S> {
    fn default() -> Self {
        Memo {
            hasher: RandomState::new(),
            seen: HashMap::new(),
            bytes: 0,
        }
    }
}

impl<S: Clone + Eq + Hash> Memo<S> {
    /// Records the pair (its state's heap `heap_bytes`); false if it was there already.
    fn insert(&mut self, linearized: &Bits, state: &S, heap_bytes: usize) -> bool {
        let key = self.hasher.hash_one((linearized, state));
        let bucket = self.seen.entry(key).or_default();
        if bucket.iter().any(|(l, s)| l == linearized && s == state) {
            return false;
        }
        self.bytes += std::mem::size_of::<(Bits, S)>() + linearized.0.len() * 8 + heap_bytes;
        bucket.push((linearized.clone(), state.clone()));
        true
    }
}

/// The search itself, over `order` (each entry: is it a return, and of which operation).
fn search<'a, M: Model>(
    model: &M,
    order: &[(bool, usize)],
    input: impl Fn(usize) -> &'a M::Input,
    output: impl Fn(usize) -> &'a M::Output,
    operations: usize,
    budget: Budget,
) -> Search
where
    M::Input: 'a,
    M::Output: 'a,
{
    // The list: node 0 is the head; the events follow in order.
    let mut nodes = Vec::with_capacity(order.len() + 1);
    nodes.push(Node {
        op: NONE,
        ret: NONE,
        prev: NONE,
        next: if order.is_empty() { NONE } else { 1 },
    });
    let mut ret_node = vec![NONE; operations];
    for (k, &(is_return, op)) in order.iter().enumerate() {
        let at = k + 1;
        if is_return {
            ret_node[op] = at;
        }
        nodes.push(Node {
            op,
            ret: NONE,
            prev: at - 1,
            next: if at == order.len() { NONE } else { at + 1 },
        });
    }
    for (k, &(is_return, op)) in order.iter().enumerate() {
        if !is_return {
            nodes[k + 1].ret = ret_node[op];
        }
    }

    let mut state = model.init();
    let mut linearized = Bits::new(operations);
    let mut memo = Memo::default();
    // The choices made: each linearized call's node, and the state before it.
    let mut calls: Vec<(usize, M::State)> = Vec::new();
    let mut longest: Vec<usize> = Vec::new();
    let mut steps = 0u64;
    let mut at = nodes[0].next;
    while nodes[0].next != NONE {
        steps += 1;
        if steps > budget.max_steps || memo.bytes > budget.max_memo_bytes {
            return Search {
                verdict: Linearizable::Unknown,
                steps: steps - 1,
                linearization: longest,
            };
        }
        let node = nodes[at];
        if node.ret != NONE {
            // A call: linearize it here if the model answers as it was answered, and this
            // (linearized set, state) is new.
            let next = model
                .step(&state, input(node.op), output(node.op))
                .and_then(|next| {
                    linearized.set(node.op);
                    if memo.insert(&linearized, &next, model.state_heap_bytes(&next)) {
                        Some(next)
                    } else {
                        linearized.clear(node.op);
                        None
                    }
                });
            match next {
                Some(next) => {
                    calls.push((at, std::mem::replace(&mut state, next)));
                    lift(&mut nodes, at);
                    at = nodes[0].next;
                }
                None => at = node.next,
            }
        } else {
            // A return whose call is not linearized: undo the last choice, try the next.
            if calls.len() > longest.len() {
                longest = calls.iter().map(|&(n, _)| nodes[n].op).collect();
            }
            let Some((n, before)) = calls.pop() else {
                return Search {
                    verdict: Linearizable::False,
                    steps,
                    linearization: longest,
                };
            };
            state = before;
            linearized.clear(nodes[n].op);
            unlift(&mut nodes, n);
            at = nodes[n].next;
        }
    }
    Search {
        verdict: Linearizable::True,
        steps,
        linearization: calls.iter().map(|&(n, _)| nodes[n].op).collect(),
    }
}

/// Takes call `c` and its return out of the list (dancing links: they keep their own
/// pointers, so [`unlift`] puts them back).
fn lift(nodes: &mut [Node], c: usize) {
    let Node {
        prev, next, ret, ..
    } = nodes[c];
    nodes[prev].next = next;
    if next != NONE {
        nodes[next].prev = prev;
    }
    let Node { prev, next, .. } = nodes[ret];
    nodes[prev].next = next;
    if next != NONE {
        nodes[next].prev = prev;
    }
}

/// Puts call `c` and its return back where they were.
fn unlift(nodes: &mut [Node], c: usize) {
    let ret = nodes[c].ret;
    let Node { prev, next, .. } = nodes[ret];
    nodes[prev].next = ret;
    if next != NONE {
        nodes[next].prev = ret;
    }
    let Node { prev, next, .. } = nodes[c];
    nodes[prev].next = c;
    if next != NONE {
        nodes[next].prev = c;
    }
}
