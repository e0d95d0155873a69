ALTER TABLE prediction_samples ADD COLUMN endpoint_id Int64 DEFAULT 0
