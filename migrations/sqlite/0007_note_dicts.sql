-- Notes at rest compressed with zstd dictionaries trained on the replica's own notes
-- (`store::notes`). A row keeps its note as text (`note`, every row written before
-- this migration, and notes holding an erasure mark) or compressed (`note_z`, one zstd
-- frame with its checksum) with the dictionary `note_dict` names. Dictionaries are
-- never changed or dropped: every row stays readable.
CREATE TABLE note_dicts (
    id         BIGINT PRIMARY KEY,     -- the dictionary's ID (a hash of its bytes), in its frames too
    version    BIGINT NOT NULL UNIQUE, -- 1, 2, ...: the newest compresses new rows
    created_at BIGINT NOT NULL,        -- ms since the Unix epoch
    samples    BIGINT NOT NULL,        -- notes it was trained on
    bytes      BLOB NOT NULL           -- the zstd dictionary
);

ALTER TABLE actions ADD COLUMN note_z BLOB;
ALTER TABLE actions ADD COLUMN note_dict BIGINT;
