"""The reference: a custom tf.distribute training loop as TensorFlow's guide writes it
(one tf.function call a step, the loss all-reduced in it), fetching the loss to the host every
100 steps. Prints the steady rate (steps/s after --warmup steps) as one JSON line."""

from __future__ import annotations

import time

from reference_setup import dataset, model, parse_args, report, setup

FETCH_EVERY = 100


def main() -> None:
    args = parse_args()
    tf, keras, strategy = setup(args)
    global_batch = args.batch * strategy.num_replicas_in_sync
    with strategy.scope():
        net = model(keras)
        optimizer = keras.optimizers.Adam(learning_rate=args.lr)
        optimizer.build(net.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    iterator = iter(strategy.experimental_distribute_dataset(dataset(tf, args, global_batch)))

    def replica_step(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            per_example = loss_fn(labels, net(features, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(iterator):
        losses = strategy.run(replica_step, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    began = None
    for step in range(1, args.steps + 1):
        loss = train_step(iterator)
        if step % FETCH_EVERY == 0 or step == args.steps:
            float(loss)
        if step == args.warmup:
            float(loss)
            began = time.perf_counter()
    report((args.steps - args.warmup) / (time.perf_counter() - began))


if __name__ == "__main__":
    main()
