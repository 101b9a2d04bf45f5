package consumer

import (
	"time"

	"github.com/IBM/sarama"
)

// SetTxnHook makes c run f before each CommitTxn (call it before Run): a test blocks a member
// there to kill it with a transaction open.
func SetTxnHook(c *Consumer, f func()) { c.txnHook = f }

// TxnProducerTimeout is the transaction timeout the transactional producer of cfg gets
// (sarama's Producer.Transaction.Timeout, sent to the coordinator in InitProducerId).
func TxnProducerTimeout(cfg Config) time.Duration {
	return cfg.txnProducerConfig().Producer.Transaction.Timeout
}

// SetDecodeHook makes f run before each record's decoding (a decoder panic, say).
func SetDecodeHook(c *Consumer, f func(*sarama.ConsumerMessage)) { c.decodeHook = f }
