"""The reference: Keras `model.fit` under the same strategy (one epoch of --steps steps).
MultiWorkerMirrored needs tf_keras (TF_USE_LEGACY_KERAS=1, set by the benchmark): Keras 3's
fit fails there. Prints the steady rate (steps/s after --warmup steps) as one JSON line."""

from __future__ import annotations

import time

from reference_setup import dataset, model, parse_args, report, setup


def main() -> None:
    args = parse_args()
    tf, keras, strategy = setup(args)
    global_batch = args.batch * strategy.num_replicas_in_sync
    marks: dict[str, float] = {}

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 == args.warmup:
                marks["warm"] = time.perf_counter()

    with strategy.scope():
        net = model(keras)
        net.compile(optimizer=keras.optimizers.Adam(learning_rate=args.lr),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    net.fit(dataset(tf, args, global_batch), epochs=1, steps_per_epoch=args.steps, verbose=0,
            callbacks=[Clock()])
    report((args.steps - args.warmup) / (time.perf_counter() - marks["warm"]))


if __name__ == "__main__":
    main()
