//! Sequential models for the [linearizability search](super::linearizability): a
//! compare-and-set register (Porcupine's etcd model, Jepsen's `cas-register`) and the
//! fenced row the nemesis's writes land on (what `src/seats/queries.rs::sell` and
//! `src/auction/queries.rs`'s bid accept).

use super::linearizability::Model;

/// A register of integers, empty at first, with read, write and compare-and-set.
#[derive(Debug, Clone, Copy, Default)]
pub struct CasRegister;

/// What a register operation asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterInput {
    /// Read the value.
    Read,
    /// Set the value.
    Write(i64),
    /// Set the value to the second if it is the first.
    Cas(i64, i64),
}

/// What a register operation was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterOutput {
    /// A read's value (`None`: empty).
    Read(Option<i64>),
    /// A write's acknowledgement.
    Done,
    /// Whether a compare-and-set took.
    Cas(bool),
    /// No answer (a timeout): any answer was possible.
    Unknown,
}

impl Model for CasRegister {
    type State = Option<i64>;
    type Input = RegisterInput;
    type Output = RegisterOutput;

    fn init(&self) -> Option<i64> {
        None
    }

    fn step(
        &self,
        state: &Option<i64>,
        input: &RegisterInput,
        output: &RegisterOutput,
    ) -> Option<Option<i64>> {
        match (*input, *output) {
            (RegisterInput::Read, RegisterOutput::Read(v)) => (v == *state).then_some(*state),
            (RegisterInput::Read, RegisterOutput::Unknown) => Some(*state),
            (RegisterInput::Write(v), RegisterOutput::Done | RegisterOutput::Unknown) => {
                Some(Some(v))
            }
            (RegisterInput::Cas(from, to), out) => {
                let takes = *state == Some(from);
                let after = if takes { Some(to) } else { *state };
                match out {
                    RegisterOutput::Cas(ok) if ok == takes => Some(after),
                    RegisterOutput::Unknown => Some(after),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn describe(&self, input: &RegisterInput, output: &RegisterOutput) -> String {
        let out = match output {
            RegisterOutput::Read(Some(v)) => v.to_string(),
            RegisterOutput::Read(None) => "nil".into(),
            RegisterOutput::Done => "ok".into(),
            RegisterOutput::Cas(true) => "ok".into(),
            RegisterOutput::Cas(false) => "fail".into(),
            RegisterOutput::Unknown => "unknown".into(),
        };
        match input {
            RegisterInput::Read => format!("read() -> {out}"),
            RegisterInput::Write(v) => format!("write({v}) -> {out}"),
            RegisterInput::Cas(a, b) => format!("cas({a}, {b}) -> {out}"),
        }
    }

    fn describe_state(&self, state: &Option<i64>) -> String {
        state.map_or("nil".into(), |v| v.to_string())
    }
}

/// One write a row took: whose, which value (a bid's maximum in cents; none for a sale),
/// under which fencing token (none when not carried or not known).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Write {
    /// The holder, as an index into [`FencedRow::holders`].
    pub holder: u32,
    /// The value written, where writes of one holder must be told apart.
    pub value: Option<i64>,
    /// The fencing token it carried.
    pub token: Option<i64>,
}

impl Write {
    /// Whether a read's entry `other` can be this write: the same holder, and the same
    /// value and token where both say.
    fn is(&self, other: &Write) -> bool {
        fn agree<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> bool {
            a.is_none() || b.is_none() || a == b
        }
        self.holder == other.holder
            && agree(&self.value, &other.value)
            && agree(&self.token, &other.token)
    }
}

/// A row behind a fenced lock, as Postgres keeps it: the writes it took, in order, and
/// the highest fencing token among them (`fence_token`, 0 at first).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Row {
    /// The writes taken, first first.
    pub taken: Vec<Write>,
    /// The row's `fence_token`.
    pub fence: i64,
}

/// What a row operation asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowInput {
    /// A purchase or a bid.
    Write(Write),
    /// Read every write the row took (the final read from Postgres).
    Read,
}

/// What a row operation was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowOutput {
    /// The write was acknowledged (a 2xx or 3xx).
    Ok,
    /// No answer came (a timeout, a 5xx, a hang-up): taken or not.
    Unknown,
    /// What a read found, in the order the row took them.
    Read(Vec<Write>),
}

/// The fenced row: a write is taken iff its token is not lower than the row's
/// `fence_token` (`fence_token <= $token`; a write without one passes, as `$5 IS NULL`
/// does for a bid) and, on an exclusive row (a seat), nothing was taken yet (`NOT sold`);
/// taking it raises `fence_token` to the write's token. A refused write (`fail`) changed
/// nothing and is left out of the history (Knossos's way), so what is judged is that
/// every acknowledged write could be taken when it happened, and that the final read
/// shows exactly what was taken.
#[derive(Debug, Clone, Default)]
pub struct FencedRow {
    /// One write only (a seat is sold once); else any number (an item's bids).
    pub exclusive: bool,
    /// A write by the holder an exclusive row was sold to is acknowledged without a
    /// change: the product's double submit, which answers with the order it made
    /// (`purchase::sale_refused` finds it with `order_of`).
    pub answers_own_sale: bool,
    /// The holders' names, for reports.
    pub holders: Vec<String>,
}

impl FencedRow {
    fn name(&self, holder: u32) -> &str {
        self.holders
            .get(holder as usize)
            .map_or("?", String::as_str)
    }

    fn describe_write(&self, w: &Write) -> String {
        let mut text = self.name(w.holder).to_string();
        if let Some(v) = w.value {
            text.push_str(&format!(" {v}"));
        }
        if let Some(t) = w.token {
            text.push_str(&format!(" #{t}"));
        }
        text
    }
}

impl Model for FencedRow {
    type State = Row;
    type Input = RowInput;
    type Output = RowOutput;

    fn init(&self) -> Row {
        Row::default()
    }

    fn step(&self, row: &Row, input: &RowInput, output: &RowOutput) -> Option<Row> {
        match (input, output) {
            (RowInput::Read, RowOutput::Read(found)) => {
                let same = found.len() == row.taken.len()
                    && row.taken.iter().zip(found).all(|(a, b)| a.is(b));
                // The fence takes tokens in order: a read whose known tokens go down
                // shows a write taken past it, whatever the search guessed for a write
                // whose token it could not tell (a resent bid).
                let mut tokens = found.iter().filter_map(|w| w.token);
                let in_order = tokens.next().is_none_or(|first| {
                    tokens
                        .try_fold(first, |last, t| (t >= last).then_some(t))
                        .is_some()
                });
                (same && in_order).then(|| row.clone())
            }
            // A read that got no answer tells nothing.
            (RowInput::Read, RowOutput::Unknown) => Some(row.clone()),
            (RowInput::Write(w), RowOutput::Ok | RowOutput::Unknown) => {
                let fenced_in = w.token.is_none_or(|t| t >= row.fence);
                let open = !self.exclusive || row.taken.is_empty();
                if fenced_in && open {
                    let mut next = row.clone();
                    next.fence = w.token.map_or(row.fence, |t| t.max(row.fence));
                    next.taken.push(w.clone());
                    return Some(next);
                }
                let own_sale = self.answers_own_sale
                    && self.exclusive
                    && row.taken.first().is_some_and(|s| s.holder == w.holder);
                // Refused: an unknown write may have been; an acknowledged one may not,
                // but for the double submit's answer.
                (*output == RowOutput::Unknown || own_sale).then(|| row.clone())
            }
            _ => None,
        }
    }

    fn describe(&self, input: &RowInput, output: &RowOutput) -> String {
        match (input, output) {
            (RowInput::Write(w), out) => {
                let out = if *out == RowOutput::Ok {
                    "ok"
                } else {
                    "unknown"
                };
                format!("write({}) -> {out}", self.describe_write(w))
            }
            (RowInput::Read, RowOutput::Read(found)) => format!(
                "read() -> [{}]",
                found
                    .iter()
                    .map(|w| self.describe_write(w))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            (RowInput::Read, _) => "read() -> ?".into(),
        }
    }

    fn state_heap_bytes(&self, row: &Row) -> usize {
        row.taken.capacity() * std::mem::size_of::<Write>()
    }

    fn describe_state(&self, row: &Row) -> String {
        format!(
            "took [{}], fence_token {}",
            row.taken
                .iter()
                .map(|w| self.describe_write(w))
                .collect::<Vec<_>>()
                .join(", "),
            row.fence
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(holder: u32, token: Option<i64>) -> RowInput {
        RowInput::Write(Write {
            holder,
            value: None,
            token,
        })
    }

    const SEAT: FencedRow = FencedRow {
        exclusive: true,
        answers_own_sale: true,
        holders: Vec::new(),
    };

    #[test]
    fn a_seat_takes_one_sale_not_below_its_fence() {
        let row = SEAT.init();
        let sold = SEAT.step(&row, &write(0, Some(5)), &RowOutput::Ok).unwrap();
        assert_eq!(sold.fence, 5);
        // A second buyer's acknowledged sale is impossible; an unknown one was refused.
        assert_eq!(SEAT.step(&sold, &write(1, Some(6)), &RowOutput::Ok), None);
        assert_eq!(
            SEAT.step(&sold, &write(1, Some(6)), &RowOutput::Unknown),
            Some(sold.clone())
        );
        // The buyer's own second submit is answered with its order.
        assert_eq!(
            SEAT.step(&sold, &write(0, Some(5)), &RowOutput::Ok),
            Some(sold.clone())
        );
        let conditional = FencedRow {
            answers_own_sale: false,
            ..SEAT
        };
        assert_eq!(
            conditional.step(&sold, &write(0, None), &RowOutput::Ok),
            None
        );
    }

    #[test]
    fn an_item_takes_bids_in_token_order() {
        let item = FencedRow {
            exclusive: false,
            ..SEAT
        };
        let after = item
            .step(&item.init(), &write(0, Some(7)), &RowOutput::Ok)
            .unwrap();
        assert_eq!(item.step(&after, &write(1, Some(6)), &RowOutput::Ok), None);
        let two = item
            .step(&after, &write(1, Some(7)), &RowOutput::Ok)
            .unwrap();
        assert_eq!(two.taken.len(), 2);
        // A bid without a token passes the fence and leaves it.
        let three = item.step(&two, &write(0, None), &RowOutput::Ok).unwrap();
        assert_eq!(three.fence, 7);
    }

    #[test]
    fn a_read_sees_exactly_what_was_taken() {
        let sold = SEAT
            .step(&SEAT.init(), &write(0, Some(5)), &RowOutput::Ok)
            .unwrap();
        let entry = |holder, token| Write {
            holder,
            value: None,
            token,
        };
        let read = |found| SEAT.step(&sold, &RowInput::Read, &RowOutput::Read(found));
        assert!(read(vec![entry(0, Some(5))]).is_some());
        assert!(
            read(vec![entry(0, None)]).is_some(),
            "a token not known agrees"
        );
        assert!(read(vec![entry(0, Some(4))]).is_none());
        assert!(read(vec![]).is_none());
        assert!(read(vec![entry(0, Some(5)), entry(1, None)]).is_none());
    }
}
