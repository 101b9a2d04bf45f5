"""A second Kafka client (librdkafka through confluent-kafka) for turnstile's interop test.

produce BROKERS TOPIC  < lines "key<TAB>value": produces each with header origin=python and the
                         murmur2_random partitioner (what Java producers pick), then prints
                         one JSON line per record: {"key", "partition"}.
count BROKERS TOPIC N:   reads as a read_committed consumer until it has records of N distinct
                         request-id headers and 3 s pass with nothing new, then prints one JSON
                         line: {request id: records}.
consume BROKERS TOPIC N: reads N records from the beginning as a read_committed consumer and
                         prints one JSON line per record: {"key", "partition", "headers", "value"}.
"""
import json
import sys
import time

from confluent_kafka import Consumer, Producer


def produce(brokers, topic):
    p = Producer({"bootstrap.servers": brokers, "partitioner": "murmur2_random", "enable.idempotence": True})
    out = []

    def done(err, msg):
        if err is not None:
            sys.exit("delivery failed: %s" % err)
        out.append({"key": msg.key().decode(), "partition": msg.partition()})

    for line in sys.stdin:
        key, value = line.rstrip("\n").split("\t", 1)
        p.produce(topic, key=key.encode(), value=value.encode(), headers=[("origin", b"python")], on_delivery=done)
    if p.flush(30) != 0:
        sys.exit("records left unflushed")
    for o in out:
        print(json.dumps(o))


def consume(brokers, topic, n):
    c = Consumer({
        "bootstrap.servers": brokers, "group.id": "interop-%d" % time.time_ns(),
        "auto.offset.reset": "earliest", "isolation.level": "read_committed", "enable.auto.commit": False,
    })
    c.subscribe([topic])
    got, deadline = [], time.time() + 60
    while len(got) < n and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            continue  # partition EOF and transient errors; the deadline bounds the wait
        got.append({
            "key": m.key().decode(), "partition": m.partition(),
            "headers": {k: v.decode() for k, v in (m.headers() or [])},
            "value": m.value().decode(),
        })
    c.close()
    if len(got) < n:
        sys.exit("read %d of %d records" % (len(got), n))
    for g in got:
        print(json.dumps(g))


def count(brokers, topic, n):
    c = Consumer({
        "bootstrap.servers": brokers, "group.id": "interop-%d" % time.time_ns(),
        "auto.offset.reset": "earliest", "isolation.level": "read_committed", "enable.auto.commit": False,
    })
    c.subscribe([topic])
    got, deadline, last = {}, time.time() + 120, time.time()
    while time.time() < deadline and (len(got) < n or time.time() - last < 3):
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        last = time.time()
        rid = dict((k, v.decode()) for k, v in (m.headers() or [])).get("request-id", "")
        got[rid] = got.get(rid, 0) + 1
    c.close()
    if len(got) < n:
        sys.exit("read %d of %d request ids" % (len(got), n))
    print(json.dumps(got))


if __name__ == "__main__":
    if sys.argv[1] == "produce":
        produce(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "count":
        count(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        consume(sys.argv[2], sys.argv[3], int(sys.argv[4]))
