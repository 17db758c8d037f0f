"""The versioned-weights channel (``collect.weights``): a learner's acting weights copied and
carried once per version, whatever the transport carries them with."""

from __future__ import annotations

import torch

from distrl.collect.weights import ActingWeights, PublishedWeights


def test_each_version_is_copied_and_carried_once() -> None:
    module = torch.nn.Linear(2, 1)
    carried: list[ActingWeights] = []
    channel = PublishedWeights({"policy": module}, lambda weights: carried.append(weights) or len(carried))
    assert channel.publish(0) == (1, True)
    assert channel.publish(0) == (1, False)  # the same version again: not copied again
    with torch.no_grad():
        module.weight.add_(1.0)  # an update, then the next version
    assert channel.publish(1) == (2, True) and channel.handle == 2
    first, second = (weights.tensors["policy"]["weight"] for weights in carried)
    assert [weights.version for weights in carried] == [0, 1]
    torch.testing.assert_close(second - first, torch.ones_like(first))  # copies, not the live module
    assert first.device.type == "cpu" and not first.requires_grad
