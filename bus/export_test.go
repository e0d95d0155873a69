package bus

// SetAccountDiskBytes re-signs a's account JWT with disk bytes of
// JetStream storage: tests size the account down to flood it.
func (a *Authority) SetAccountDiskBytes(disk int64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.accountClaims.Limits.JetStreamLimits = jetStreamLimits(disk)
	token, err := a.accountClaims.Encode(a.operator)
	if err != nil {
		return err
	}
	a.accountJWT = token
	return nil
}
