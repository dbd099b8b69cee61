//! What each row of a run is, and the checker that marks it as it is recorded: a
//! violation of the article's invariant ("writes accepted by the resource come from at
//! most one holder at a time, in token order") or of what makes it hold, or a refusal
//! that kept it. The sentences are the page's, in the article's words; this is the one
//! place they are written.

use std::time::Duration;

use super::{LEASE_TTL, SEAT};

/// One operation of a simulated server (or the lab's fault), as its row shows it.
#[derive(Clone, Debug)]
pub(super) enum Action {
    /// The lock was granted with `token`; with step 1 off, `overwrote` names the server
    /// whose key the `SET` without `NX` replaced.
    Granted {
        token: i64,
        overwrote: Option<String>,
    },
    /// `SET … NX` failed: `holder` has the key. Recorded once per server; it retries.
    Refused { holder: String },
    /// `SET … NX` refused though the key is gone: its lease lapsed, and its lock-delay
    /// ([`super::LOCK_DELAY`]) lasts this much longer. Recorded once per server; it
    /// retries.
    Delayed(Duration),
    /// Refused until [`super::GIVE_UP`]: the server stops trying. `holder` and
    /// `no_expiry` describe the key it kept finding.
    GaveUp { holder: String, no_expiry: bool },
    /// The server crashed: no write, no release. `key_forever`: it held a key that
    /// never expires (step 2 off).
    Crashed { key_forever: bool },
    /// Read the seat: sold to someone (the server leaves), or free (it charges the card).
    Read { sold_to: Option<String> },
    /// The server pauses for this long.
    Paused(Duration),
    /// The server sends its write, and the network holds it this long (`net_delay.rs`).
    Sent(Duration),
    /// Step mode (`stepper.rs`): the server charges the card.
    Paid,
    /// Step mode: the server stalls until the reader wakes it.
    Stalled,
    /// Step mode: the server wakes from its stall.
    Woke,
    /// Step mode: the reader lets the server's lease run out (`lapse.lua`).
    Lapsed(Lapse),
    /// The write of "14C sold", with the token it carried (none without a lock), as the
    /// seat's row judged it.
    Wrote {
        token: Option<i64>,
        accepted: bool,
        rule: WriteRule,
        /// The row before the write: who it was sold to, its highest accepted token.
        before_sold_to: Option<String>,
        before_token: i64,
    },
    /// The release: `deleted` whether a key was deleted; `whose` the server whose key it
    /// was (with step 3 off it may not be the releaser's).
    Released {
        deleted: bool,
        whose: Option<String>,
    },
    /// Redis lost every key of the lock (`keys` of them).
    StoreLost { keys: usize },
    /// Redis's wall clock jumped forward `by` while `holder` held the lock with `left`
    /// to go by its own clock (`None`: no lock is taken); `ended`: its key was gone
    /// right after (one made without PX stays).
    ClockJumped {
        by: Duration,
        holder: String,
        left: Option<Duration>,
        ended: bool,
    },
    /// A store failed; the server stops.
    Failed(String),
}

/// What became of a lease the reader let lapse in step mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lapse {
    /// Redis expired the key.
    Expired,
    /// The key was made without PX (step 2 off): it never expires.
    NoExpiry,
    /// The key was no longer the server's.
    NotHeld,
}

/// What the seat's row checks of a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WriteRule {
    /// Nothing: the write is applied.
    Unconditional,
    /// `fence_token <= $token` (the article's step 4).
    Fenced,
    /// `sold_to IS NULL` (the article's conditional `UPDATE`).
    IfUnsold,
}

impl Action {
    /// What the server did, for the table's server column.
    pub(super) fn did(&self) -> String {
        match self {
            Action::Granted {
                token,
                overwrote: Some(other),
            } => format!("SET without NX overwrites {other}'s key: token {token}"),
            Action::Granted { token, .. } => format!("takes the lock: token {token}"),
            Action::Refused { holder } => {
                format!("SET NX fails: {holder} holds it; \"someone is buying\", retries")
            }
            Action::Delayed(left) => format!(
                "is refused: the lease lapsed, but nobody may take it for the lock-delay's {} more; retries",
                in_secs(*left)
            ),
            Action::GaveUp { .. } => "gives up: still refused".into(),
            Action::Crashed { .. } => "crashes (no write, no release)".into(),
            Action::Read { sold_to: Some(who) } => format!("reads {SEAT}: sold to {who}; leaves"),
            Action::Read { sold_to: None } => format!("reads {SEAT}: free; goes on to pay"),
            Action::Paused(pause) => format!("pauses {}", in_secs(*pause)),
            Action::Sent(delay) => format!(
                "sends its write, inside its lease; the network holds it {}",
                in_secs(*delay)
            ),
            Action::Paid => "charges the card".into(),
            Action::Stalled => {
                "pauses (a GC pause, a stalled VM): it still believes it holds the lock".into()
            }
            Action::Woke => {
                "wakes, and goes on where it stopped without looking at its lease".into()
            }
            Action::Lapsed(Lapse::Expired) => "loses its lease: Redis expires the key".into(),
            Action::Lapsed(Lapse::NoExpiry) => {
                "keeps its key: made without PX, it never expires".into()
            }
            Action::Lapsed(Lapse::NotHeld) => {
                "has no lease left to lose: the key is not its own".into()
            }
            Action::Wrote { token: Some(t), .. } => {
                format!("writes \"{SEAT} sold\" with token {t}")
            }
            Action::Wrote { token: None, .. } => format!("writes \"{SEAT} sold\""),
            Action::Released {
                deleted: true,
                whose: Some(whose),
            } => {
                format!("releases: deletes the key ({whose}'s)")
            }
            Action::Released { .. } => "releases: nothing deleted".into(),
            Action::StoreLost { keys } => {
                format!("Redis restarts empty: the lock's {keys} keys are lost")
            }
            Action::ClockJumped {
                by,
                holder,
                left,
                ended,
            } => {
                let jumps = format!("Redis's clock jumps forward {}", in_secs(*by));
                match (left, ended) {
                    (Some(left), true) => format!(
                        "{jumps}: {holder}'s lease ends by Redis's clock, with {} left by {holder}'s",
                        in_secs(*left)
                    ),
                    (Some(_), false) => format!("{jumps}: {holder}'s key is still there"),
                    (None, _) => format!("{jumps}: no lock is taken, so none ends"),
                }
            }
            Action::Failed(why) => format!("stops: {why}"),
        }
    }

    /// What the seat's row did, for its column ('' when the seat was not touched).
    pub(super) fn seat(&self, server: &str) -> String {
        let Action::Wrote {
            token,
            accepted,
            rule,
            before_sold_to,
            before_token,
        } = self
        else {
            return String::new();
        };
        let again = before_sold_to
            .as_ref()
            .map(|who| format!(" (it was sold to {who})"))
            .unwrap_or_default();
        match (accepted, rule) {
            (true, WriteRule::Fenced) => format!(
                "accepted: {} ≥ {before_token}; sold to {server}{again}",
                token.unwrap_or(0)
            ),
            (true, _) => format!("accepted: sold to {server}{again}"),
            (false, WriteRule::Fenced) => {
                format!(
                    "refused: {} < {before_token}, already accepted",
                    token.unwrap_or(0)
                )
            }
            (false, _) => format!(
                "refused: no row WHERE sold = false (sold to {})",
                before_sold_to.as_deref().unwrap_or("?")
            ),
        }
    }
}

/// Why `err` happened, for a row: its chain of causes, each said once (a store's error
/// often repeats its cause in its own text: "timed out: timed out").
pub(super) fn why(err: &anyhow::Error) -> String {
    let mut said: Vec<String> = Vec::new();
    for cause in err.chain().map(ToString::to_string) {
        if !said.iter().any(|earlier| earlier.contains(&cause)) {
            said.push(cause);
        }
    }
    said.join(": ")
}

/// "1.75 s".
pub(super) fn in_secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// What a mark says of its row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MarkClass {
    /// The row breaks the article's invariant, or what keeps it (red).
    Violation,
    /// A step refused what would have broken it (green).
    Saved,
    /// A store failed and the server stopped: the run is incomplete (yellow).
    Failed,
}

impl MarkClass {
    /// `violation`, `saved` or `failed`: `lab_rows.mark`, the row's CSS class.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            MarkClass::Violation => "violation",
            MarkClass::Saved => "saved",
            MarkClass::Failed => "failed",
        }
    }
}

/// The checker's verdict on one row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Mark {
    /// `second-sale`, `stale-write-accepted`, … (the page's `data-kind`).
    pub kind: &'static str,
    /// Red, green or yellow.
    pub class: MarkClass,
    /// The page's sentence.
    pub sentence: String,
}

impl Mark {
    fn violation(kind: &'static str, sentence: String) -> Option<Mark> {
        Some(Mark {
            kind,
            class: MarkClass::Violation,
            sentence,
        })
    }

    fn saved(kind: &'static str, sentence: String) -> Option<Mark> {
        Some(Mark {
            kind,
            class: MarkClass::Saved,
            sentence,
        })
    }
}

/// Why a key without expiry blocks 14C: its holder crashed (for ever), or stalls (as
/// long as it does).
fn no_expiry(holder: &str, crashed: bool) -> String {
    if crashed {
        format!(
            "{holder} crashed holding a key with no expiry: nobody can take {SEAT} until someone deletes the key by hand."
        )
    } else {
        format!(
            "{holder} holds a key with no expiry and stalls: nobody can take {SEAT} for as long as it does (a lease would end after its TTL)."
        )
    }
}

/// One side's history so far, as the checker needs it.
#[derive(Default)]
pub(super) struct Checker {
    /// Every grant: (server, token), in order.
    grants: Vec<(String, i64)>,
    /// The server that crashed, until the next grant is marked as its lapse.
    crashed: Option<String>,
    /// Redis lost the lock, and no grant has been marked since.
    store_lost: bool,
    /// Whether a refusal was marked.
    refused: bool,
}

impl Checker {
    /// Marks `action` of `server`, recorded now, and remembers it.
    pub(super) fn mark(&mut self, server: &str, action: &Action) -> Option<Mark> {
        match action {
            Action::Granted { token, overwrote } => self.granted(server, *token, overwrote),
            // The first refusal of the side says what NX did; the others would repeat it.
            Action::Refused { holder } if !std::mem::replace(&mut self.refused, true) => {
                Mark::saved(
                    "create-refused",
                    format!(
                        "SET … NX fails: {holder} created the key first, so {server} is told someone is buying."
                    ),
                )
            }
            Action::GaveUp {
                holder,
                no_expiry: true,
            } => Mark::violation(
                "locked-forever",
                no_expiry(holder, self.crashed.as_deref() == Some(holder.as_str())),
            ),
            Action::Crashed { key_forever } => {
                self.crashed = Some(server.into());
                key_forever
                    .then(|| no_expiry(server, true))
                    .and_then(|sentence| Mark::violation("locked-forever", sentence))
            }
            Action::StoreLost { .. } => {
                self.store_lost = true;
                None
            }
            Action::Failed(why) => Some(Mark {
                kind: "failed",
                class: MarkClass::Failed,
                sentence: format!("{server} stops: {why}. The run shows what happened until then."),
            }),
            Action::Wrote {
                token,
                accepted,
                rule,
                before_sold_to,
                before_token,
            } => self.wrote(
                server,
                *token,
                *accepted,
                *rule,
                before_sold_to,
                *before_token,
            ),
            Action::Released {
                deleted: true,
                whose: Some(whose),
            } if whose != server => Mark::violation(
                "foreign-release",
                format!(
                    "{server}'s plain DEL removes {whose}'s lock while {whose} still holds it: the next SET NX succeeds for someone else, and two servers can work on {SEAT} at once."
                ),
            ),
            Action::Released {
                deleted: false,
                whose: Some(whose),
            } if whose != server => Mark::saved(
                "release-refused",
                format!(
                    "Compare-and-delete deletes nothing: the key holds {whose}'s owner token, not {server}'s."
                ),
            ),
            _ => None,
        }
    }

    fn granted(&mut self, server: &str, token: i64, overwrote: &Option<String>) -> Option<Mark> {
        let earlier = self
            .grants
            .iter()
            .find(|(other, t)| other != server && *t >= token)
            .cloned();
        let highest = self.grants.iter().map(|(_, t)| *t).max().unwrap_or(0);
        let before = self
            .grants
            .last()
            .map_or("the last holder".into(), |(s, _)| s.clone());
        self.grants.push((server.into(), token));
        // The first grant after a loss or a crash is the one that tells what it did.
        let after_loss = std::mem::take(&mut self.store_lost);
        let after_crash = self.crashed.take();
        if let Some((other, their)) = earlier {
            return Mark::violation(
                "token-repeated",
                format!(
                    "{server} is granted token {token}, and {other} was granted {their}: tokens went backwards when Redis lost its data, so the fence can no longer tell {other}'s write from {server}'s."
                ),
            );
        }
        if let Some(other) = overwrote.as_ref().filter(|o| *o != server) {
            return Mark::violation(
                "two-holders",
                format!(
                    "Without NX, {server}'s SET replaces the key {other} created: both now believe they hold {SEAT}."
                ),
            );
        }
        if after_loss {
            return Mark::saved(
                "fresh-token",
                format!(
                    "Redis lost the counter, but token {token} comes from a block reserved in Postgres, above every token issued ({highest}). The lock itself was lost and granted again while {before} may still work: telling their writes apart is now the fence's job (etcd, a consensus store, would not lose the grant)."
                ),
            );
        }
        if let Some(crashed) = after_crash {
            return Mark::saved(
                "lapse-freed",
                format!(
                    "{crashed} crashed holding the lock, and its lease ran out on its own after {}: {server} takes {SEAT}.",
                    in_secs(LEASE_TTL)
                ),
            );
        }
        None
    }

    fn wrote(
        &self,
        server: &str,
        token: Option<i64>,
        accepted: bool,
        rule: WriteRule,
        before_sold_to: &Option<String>,
        before_token: i64,
    ) -> Option<Mark> {
        if !accepted {
            return match rule {
                WriteRule::Fenced => Mark::saved(
                    "stale-write-refused",
                    format!(
                        "Refused: {server}'s token {} is lower than {before_token}, the last one the seat's row accepted. The fence stops the slow holder.",
                        token.unwrap_or(0)
                    ),
                ),
                _ => Mark::saved(
                    "conditional-refused",
                    format!(
                        "UPDATE … WHERE sold = false changes no row: {} bought {SEAT} first, in one atomic statement. {server} has already paid and is owed a refund: a lock earns its keep when the work spans several steps, like this payment.",
                        before_sold_to.as_deref().unwrap_or("someone")
                    ),
                ),
            };
        }
        // Judged by what the write met in its own transaction (the row read FOR UPDATE),
        // not by the order reports reach the checker, which two close writes can swap.
        if let (Some(mine), true) = (token, token < Some(before_token)) {
            return Mark::violation(
                "stale-write-accepted",
                format!(
                    "{server}'s write with token {mine} is accepted, though the row had accepted token {before_token}: without the fence a lease is only advisory."
                ),
            );
        }
        let earlier = before_sold_to.as_ref().filter(|them| *them != server)?;
        Mark::violation(
            "second-sale",
            format!(
                "{SEAT} is sold a second time: {server}'s write is accepted after {earlier}'s, and the seat exists once."
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fenced write of `token` that met a row last written by `before` with `token`.
    fn wrote(token: i64, accepted: bool, before: Option<(&str, i64)>) -> Action {
        Action::Wrote {
            token: Some(token),
            accepted,
            rule: WriteRule::Fenced,
            before_sold_to: before.map(|(who, _)| who.to_string()),
            before_token: before.map_or(0, |(_, t)| t),
        }
    }

    fn kind(mark: Option<Mark>) -> Option<&'static str> {
        mark.map(|m| m.kind)
    }

    #[test]
    fn a_cause_repeated_in_its_errors_text_is_said_once() {
        let err = anyhow::anyhow!("timed out")
            .context("lease store unavailable: timed out")
            .context("the lease store");
        assert_eq!(
            why(&err),
            "the lease store: lease store unavailable: timed out"
        );
    }

    #[test]
    fn a_late_lower_token_accepted_is_a_stale_write_and_refused_is_saved() {
        let mut check = Checker::default();
        assert_eq!(kind(check.mark("B", &wrote(3, true, None))), None);
        let late = wrote(2, true, Some(("B", 3)));
        assert_eq!(kind(check.mark("A", &late)), Some("stale-write-accepted"));
        let refused = wrote(2, false, Some(("B", 3)));
        assert_eq!(kind(check.mark("A", &refused)), Some("stale-write-refused"));
    }

    #[test]
    fn a_second_holder_writing_in_token_order_is_a_second_sale() {
        let mut check = Checker::default();
        check.mark("A", &wrote(2, true, None));
        let again = wrote(3, true, Some(("A", 2)));
        assert_eq!(kind(check.mark("B", &again)), Some("second-sale"));
    }

    #[test]
    fn a_token_granted_again_is_repeated_and_after_a_loss_a_higher_one_is_fresh() {
        let grant = |token| Action::Granted {
            token,
            overwrote: None,
        };
        let mut check = Checker::default();
        check.mark("A", &grant(1));
        check.mark("lab", &Action::StoreLost { keys: 3 });
        assert_eq!(kind(check.mark("B", &grant(1))), Some("token-repeated"));
        let mut check = Checker::default();
        check.mark("A", &grant(1));
        check.mark("lab", &Action::StoreLost { keys: 3 });
        assert_eq!(kind(check.mark("B", &grant(10_001))), Some("fresh-token"));
        assert_eq!(kind(check.mark("C", &grant(10_002))), None);
    }

    #[test]
    fn releases_are_judged_by_whose_key_they_met() {
        let mut check = Checker::default();
        let plain_del = Action::Released {
            deleted: true,
            whose: Some("B".into()),
        };
        assert_eq!(kind(check.mark("A", &plain_del)), Some("foreign-release"));
        assert_eq!(kind(check.mark("B", &plain_del)), None);
        let compare_and_delete = Action::Released {
            deleted: false,
            whose: Some("B".into()),
        };
        assert_eq!(
            kind(check.mark("A", &compare_and_delete)),
            Some("release-refused")
        );
    }

    /// The jump's row says what the jump did to the holder's lease, and is not marked:
    /// what it breaks shows at the writes.
    #[test]
    fn a_clock_jump_says_whether_it_ended_the_lease_and_is_not_marked() {
        let jumped = |left, ended| Action::ClockJumped {
            by: Duration::from_secs(2),
            holder: "A".into(),
            left,
            ended,
        };
        let ends = jumped(Some(Duration::from_millis(1200)), true);
        assert_eq!(
            ends.did(),
            "Redis's clock jumps forward 2.00 s: A's lease ends by Redis's clock, with 1.20 s left by A's"
        );
        assert_eq!(kind(Checker::default().mark("lab", &ends)), None);
        let no_px = jumped(Some(Duration::from_millis(1200)), false);
        assert_eq!(
            no_px.did(),
            "Redis's clock jumps forward 2.00 s: A's key is still there"
        );
        assert_eq!(
            jumped(None, true).did(),
            "Redis's clock jumps forward 2.00 s: no lock is taken, so none ends"
        );
    }

    #[test]
    fn a_crash_without_expiry_locks_forever_and_with_it_lapses() {
        let mut check = Checker::default();
        let forever = Action::Crashed { key_forever: true };
        assert_eq!(kind(check.mark("A", &forever)), Some("locked-forever"));
        let gave_up = Action::GaveUp {
            holder: "A".into(),
            no_expiry: true,
        };
        assert_eq!(kind(check.mark("B", &gave_up)), Some("locked-forever"));
        let mut check = Checker::default();
        let crash = Action::Crashed { key_forever: false };
        assert_eq!(kind(check.mark("A", &crash)), None);
        let grant = Action::Granted {
            token: 2,
            overwrote: None,
        };
        assert_eq!(kind(check.mark("B", &grant)), Some("lapse-freed"));
    }
}
