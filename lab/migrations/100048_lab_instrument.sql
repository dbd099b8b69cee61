-- The lab as an instrument (issue 48). Step mode (lab/src/lab/stepper.rs, `GET /lab/step`): the reader
-- is the scheduler. A step session is a lab run (`lab_runs`, fault 'stepped', finished
-- at once: nothing runs in the background) with one side, one seat row (`lab_seats`) and
-- its table (`lab_rows`), written one row per event the reader asks for. Numbered after
-- the issue, so that migrations other branches add meanwhile never take its number.
--
-- lab_step_sessions: which runs are step sessions, and the side they race on ('off': the
-- run's step is switched off; 'on': every step on).
CREATE TABLE lab_step_sessions (
    run_id      bigint      PRIMARY KEY REFERENCES lab_runs ON DELETE CASCADE,
    side        text        NOT NULL CHECK (side IN ('off', 'on')),
    -- When its keys in Redis and its fence ceiling were deleted (by "End", or once it
    -- was left idle): no event is taken after.
    ended_at    timestamptz,
    last_event_at timestamptz NOT NULL DEFAULT now()
);

-- lab_step_states: the state after each event (seq as in lab_rows; 0 is the start),
-- read right after the event from Redis and Postgres, so that the reader can scrub back
-- along the timeline. Also what the next events need: the grant's owner and fencing
-- token (to release or write with it later) and whether a pause or lapse happened.
CREATE TABLE lab_step_states (
    run_id        bigint  NOT NULL REFERENCES lab_step_sessions ON DELETE CASCADE,
    seq           integer NOT NULL,
    -- A, B or C, and the event: grant, refused, read, pay, pause, wake, write, release, lapse.
    server        text    NOT NULL,
    event         text    NOT NULL,
    -- Granted: the lease's owner token and fencing token. Read: whether the seat was free.
    owner_token   text,
    fencing_token bigint,
    seat_free     boolean,
    -- Seat 14C's row after the event.
    seat_sold_to  text,
    seat_token    bigint  NOT NULL,
    seat_sales    integer NOT NULL,
    -- The lease key after the event: its holder (a server, or a token nobody was
    -- granted), its PTTL (-1: no expiry, -2: absent) and the group's fencing counter.
    lock_holder   text,
    lock_pttl_ms  bigint  NOT NULL,
    fence_counter bigint,
    PRIMARY KEY (run_id, seq)
);

-- The lab's challenges (lab/src/lab/challenge.rs, `GET /lab/challenges`): an attempt is
-- a challenge, the reader's answer, and the timed runs the answer asked for (each a lab
-- run with its own permalink), judged on one side of each by the lab's checker.
CREATE TABLE lab_challenge_attempts (
    id          bigserial   PRIMARY KEY,
    challenge   text        NOT NULL,
    answer      text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE lab_challenge_runs (
    attempt_id  bigint  NOT NULL REFERENCES lab_challenge_attempts ON DELETE CASCADE,
    run_id      bigint  NOT NULL REFERENCES lab_runs ON DELETE CASCADE,
    -- The side the run is judged on: 'off' (the answer's step switched off) or 'on'.
    side        text    NOT NULL CHECK (side IN ('off', 'on')),
    PRIMARY KEY (attempt_id, run_id)
);
