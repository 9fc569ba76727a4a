-- Projection builders' cursors and counters. The projection tables themselves are
-- created by the builders (src/projection/schema.rs), one set per version, so that a
-- rebuild can fill a new set side by side and swap it in.
CREATE TABLE proj_meta (
    name          TEXT PRIMARY KEY,    -- cases, parties, timeline
    cursor        BIGINT NOT NULL,     -- last action ID applied
    applied       BIGINT NOT NULL,     -- actions applied
    unknown_codes BIGINT NOT NULL,     -- action types not in the code list
    unknown_other BIGINT NOT NULL,     -- unknown states, courts, roles (kept verbatim)
    unparsed      BIGINT NOT NULL,     -- actions whose poznamka did not parse
    erased        BIGINT NOT NULL,     -- erasures applied
    updated_at    BIGINT NOT NULL,
    error         TEXT,                -- why the builder stopped, naming the action
    version       BIGINT NOT NULL      -- the table set in use (cases_v1, ...)
);

-- Projection verification and erasure read a case's actions.
CREATE INDEX actions_case ON actions (case_number, id);
