-- Spoiled records of the feed (issue 40; src/store/quarantine.rs). Written only by the
-- poller, in the transaction that stores the page and moves the checkpoint past them,
-- and by `isir quarantine retry` under the lease. status 'held': the record was held
-- back (not in `actions`); 'repaired': it was decoded from windows-1250 and stored in
-- `actions`, this row keeps its bytes as received. raw is the record, <data> to
-- </data>, exactly as the register sent it.
CREATE TABLE quarantine (
    seq         INTEGER PRIMARY KEY,                 -- order received (rowid)
    action_id   BIGINT,                  -- NULL when the ID could not be read
    case_number TEXT,                    -- NULL when it could not be read
    reason      TEXT NOT NULL,           -- cp1250 | encoding | missing_field | bad_value | out_of_order
    detail      TEXT NOT NULL,           -- names the field, never its value
    status      TEXT NOT NULL,           -- held | repaired
    raw         BLOB NOT NULL,
    page_after  BIGINT NOT NULL,         -- the idPodnetu of the request that brought it
    received_at BIGINT NOT NULL,         -- ms since the Unix epoch
    epoch       BIGINT NOT NULL          -- fencing epoch of the writer that stored it
);
CREATE INDEX quarantine_action ON quarantine (action_id);
CREATE INDEX quarantine_case ON quarantine (case_number);

-- A read model: how many actions of a case are held back. Written with `quarantine` in
-- the same transaction; the API reads this (never `quarantine` or `actions`) to give
-- a case's `quarantined_actions`. Holds no personal data, only case numbers.
CREATE TABLE case_quarantine (
    case_number TEXT PRIMARY KEY,
    held        BIGINT NOT NULL
);
