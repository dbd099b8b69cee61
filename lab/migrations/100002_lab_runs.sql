-- The lab in the browser (issue 30, `GET /lab`, lab/src/lab/): the article's table
-- built live. A run races three simulated servers (A, B, C) for seat 14C twice at once:
-- one side with one of the article's steps switched off, one side with every step on.
--
-- lab_runs: what was asked (the step switched off, the fault, the pause, the seed), so a
-- run's permalink can say what produced it.
CREATE TABLE lab_runs (
    id          bigserial   PRIMARY KEY,
    -- create-if-absent, lease, owner-check, fencing, ledger or conditional.
    step        text        NOT NULL,
    -- none, pause-before-write, pause-before-release, crash-after-grant,
    -- crash-before-write or redis-restart.
    fault       text        NOT NULL,
    -- At most lab/src/lab/mod.rs MAX_PAUSE (10 s).
    pause_ms    integer     NOT NULL CHECK (pause_ms BETWEEN 0 AND 10000),
    seed        bigint      NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    -- NULL while the run is going; the stream ends when it is set.
    finished_at timestamptz,
    -- Set (with finished_at) when a run was found unfinished long after its limit: the
    -- server running it stopped mid-way, and what it left in the stores was deleted.
    cut_off     boolean     NOT NULL DEFAULT false
);

-- lab_seats: the protected resource, seat 14C's row, one per run and side. It is the
-- article's seat database, not the product's event_seats: with fencing on it rejects a
-- write whose token is lower than the last one it accepted, and that is ALL it checks
-- (the product's row also refuses a second sale outright, which would hide what each
-- lock step does). `sales` counts accepted writes: 2 is a seat sold twice.
CREATE TABLE lab_seats (
    run_id      bigint  NOT NULL REFERENCES lab_runs ON DELETE CASCADE,
    side        text    NOT NULL CHECK (side IN ('off', 'on')),
    sold_to     text,
    -- The highest fencing token this row has accepted (0: none yet).
    fence_token bigint  NOT NULL DEFAULT 0,
    sales       integer NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, side)
);

-- lab_rows: the table as it happened, one row per operation, written as it completes
-- (the page's stream reads them from here, so does the permalink's replay). Every column
-- is what a real Redis or Postgres operation returned, read right after it.
CREATE TABLE lab_rows (
    run_id      bigint  NOT NULL REFERENCES lab_runs ON DELETE CASCADE,
    side        text    NOT NULL CHECK (side IN ('off', 'on')),
    seq         integer NOT NULL,
    -- Milliseconds from the run's start (one monotonic clock for both sides).
    at_ms       bigint  NOT NULL,
    -- A, B, C, or 'lab' for the fault the lab injects (Redis losing its data).
    server      text    NOT NULL,
    did         text    NOT NULL,
    -- The lease key as read after the operation: its holder and TTL, in words.
    lock_key    text    NOT NULL,
    -- The group's fencing counter as read after the operation (NULL: none in Redis).
    fence_counter bigint,
    -- What seat 14C's row accepted or refused, and why ('' when untouched).
    seat        text    NOT NULL,
    -- The checker's verdict on this row (lab/src/lab/check.rs): NULL, or a kind
    -- (second-sale, stale-write-accepted, …), its class (a violation of the invariant, a
    -- refusal that saved it, or a store that failed) and the sentence the page shows.
    mark_kind   text,
    mark        text CHECK (mark IN ('violation', 'saved', 'failed')),
    sentence    text,
    PRIMARY KEY (run_id, side, seq)
);
