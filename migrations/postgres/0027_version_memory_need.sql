-- A GGUF version's memory need (docs/llm.md, "Memory"): what the built-in
-- LLM engine needs to run the file (its weights as float32 and the K/V
-- cache its serving.llm sizes), in MiB, computed by validation from
-- the file. It is a fact derived from the version's immutable files, not
-- a setting: validation writes it once, and placement sizes a replica by
-- the larger of it and memory_mb. 0: not computed (every other version).
ALTER TABLE model_versions ADD COLUMN memory_need_mb integer NOT NULL DEFAULT 0 CHECK (memory_need_mb >= 0);

-- Versions stay immutable but for their status and the memory need,
-- which may be written once (from 0); it never changes after.
CREATE OR REPLACE FUNCTION model_versions_immutable() RETURNS trigger AS $$
BEGIN
    IF (to_jsonb(NEW) - 'status' - 'memory_need_mb') IS DISTINCT FROM (to_jsonb(OLD) - 'status' - 'memory_need_mb')
       OR (OLD.memory_need_mb <> 0 AND NEW.memory_need_mb <> OLD.memory_need_mb) THEN
        RAISE EXCEPTION 'model versions are immutable';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
