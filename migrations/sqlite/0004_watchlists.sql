-- Watchlists (src/watchlist): named sets of subjects that creditors monitor, read through
-- `/v1/watchlists/{name}/events` and delivered to a webhook by the notifier. Written by
-- operators (`isir watch`, the admin listener) and by the notifier (its cursor and
-- delivery state), never by the poller or the projection builders.
CREATE TABLE watchlists (
    name              TEXT PRIMARY KEY,
    roles             TEXT NOT NULL,      -- debtor | all
    webhook_url       TEXT,               -- NULL: read through the API only
    secret            TEXT,               -- whsec_<base64>: the signing key
    previous_secret   TEXT,               -- still signed with until previous_until (rotation)
    previous_until    BIGINT,
    created_at        BIGINT NOT NULL,    -- ms
    created_watermark BIGINT NOT NULL,    -- the projection watermark at creation
    entries           BIGINT NOT NULL,
    cursor            BIGINT NOT NULL,    -- feed position delivered to the webhook
    delivered_batches BIGINT NOT NULL DEFAULT 0,
    delivered_events  BIGINT NOT NULL DEFAULT 0,
    last_delivered_at BIGINT,
    failing_since     BIGINT,             -- first failed attempt of the batch now pending
    failing           BIGINT NOT NULL DEFAULT 0,  -- 1: failing longer than watch.failing_after_secs
    last_error        TEXT,
    last_attempt_at   BIGINT,
    claim_holder      TEXT,               -- the notifier delivering this list now
    claim_until       BIGINT
);

CREATE TABLE watch_entries (
    list TEXT NOT NULL REFERENCES watchlists (name) ON DELETE CASCADE,
    kind TEXT NOT NULL,                   -- ico | rc | case
    key  TEXT NOT NULL,                   -- as the parties projection keys it
    PRIMARY KEY (list, kind, key)
);
