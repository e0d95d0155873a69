-- Who acted is recorded by id. The text columns (actor, created_by,
-- updated_by) stay as the label shown, the email or key prefix at the time;
-- the id columns say which user (the person, also behind a key they made)
-- and which key acted. Rows written before this migration have NULL ids and
-- keep their label, so they stay readable. The ids carry no foreign key:
-- the record outlives the user or key it names.
ALTER TABLE audit_log ADD COLUMN actor_user_id bigint, ADD COLUMN actor_key_id bigint;
ALTER TABLE models ADD COLUMN created_by_user_id bigint, ADD COLUMN created_by_key_id bigint;
ALTER TABLE model_versions ADD COLUMN created_by_user_id bigint, ADD COLUMN created_by_key_id bigint;
ALTER TABLE cost_rates ADD COLUMN created_by_user_id bigint, ADD COLUMN created_by_key_id bigint;
ALTER TABLE budgets ADD COLUMN updated_by_user_id bigint, ADD COLUMN updated_by_key_id bigint;
