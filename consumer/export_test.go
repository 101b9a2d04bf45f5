package consumer

// SetTxnHook makes c run f before each CommitTxn (call it before Run): a test blocks a member
// there to kill it with a transaction open.
func SetTxnHook(c *Consumer, f func()) { c.txnHook = f }
