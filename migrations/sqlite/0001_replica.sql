-- The replica of the action stream and the single writer's state.
CREATE TABLE actions (
    id                BIGINT PRIMARY KEY,  -- action ID: the only cursor
    created           TEXT NOT NULL,       -- datumZalozeniUdalosti, verbatim
    published         TEXT NOT NULL,       -- datumZverejneniUdalosti, verbatim
    document_url      TEXT,                -- dokumentUrl
    case_number       TEXT NOT NULL,       -- spisovaZnacka
    type_code         TEXT NOT NULL,       -- typUdalosti
    type_name         TEXT NOT NULL,       -- popisUdalosti
    section           TEXT,                -- oddil
    number_in_section BIGINT,              -- cisloVOddilu
    note              TEXT,                -- poznamka, unescaped, raw
    stored_at         BIGINT NOT NULL,     -- ms since the Unix epoch
    epoch             BIGINT NOT NULL      -- fencing epoch of the writer that stored it
) WITHOUT ROWID;

CREATE TABLE writer_state (
    singleton          INTEGER PRIMARY KEY CHECK (singleton = 1),
    checkpoint         BIGINT,             -- last stored action ID; NULL: nothing stored
    epoch              BIGINT NOT NULL,    -- highest fencing epoch seen
    updated_at         BIGINT NOT NULL,
    head_id            BIGINT,             -- newest ID the source reported
    head_checked_at    BIGINT,             -- when (ms)
    last_tick_outcome  TEXT,
    last_tick_at       BIGINT
);
INSERT INTO writer_state (singleton, checkpoint, epoch, updated_at) VALUES (1, NULL, 0, 0);

CREATE TABLE tick_log (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    at         BIGINT NOT NULL,
    outcome    TEXT NOT NULL,
    pages      BIGINT NOT NULL,
    actions    BIGINT NOT NULL,
    requests   BIGINT NOT NULL,
    checkpoint BIGINT,
    detail     TEXT
);

-- The lease and the budget when no Redis is configured.
CREATE TABLE lease (
    name       TEXT PRIMARY KEY,
    holder     TEXT,
    expires_at BIGINT NOT NULL DEFAULT 0,
    epoch      BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE budget_day (
    day  TEXT PRIMARY KEY,                 -- Europe/Prague calendar day
    used BIGINT NOT NULL
);

CREATE TABLE budget_log (
    at BIGINT NOT NULL                     -- ms; the sliding per-minute window
);
CREATE INDEX budget_log_at ON budget_log (at);

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
