ALTER TABLE prediction_samples ADD COLUMN pinned UInt8 DEFAULT 0
