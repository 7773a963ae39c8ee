package postgres

// SetBeforeSend makes j call f as each batch is about to be sent, after
// it was taken for sending and before the holder's check: where a pause
// of the process hurts most.
func SetBeforeSend(j *Journal, f func()) { j.beforeSend = f }
