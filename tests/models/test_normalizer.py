import torch

from distrl.models.normalizer import RunningMeanStd, batch_moments


def test_running_stats_match_batch_statistics_over_all_updates() -> None:
    gen = torch.Generator().manual_seed(0)
    chunks = [torch.randn(n, 4, generator=gen) * 3 + 1 for n in (1, 5, 50)]
    rms = RunningMeanStd((4,))
    for chunk in chunks:
        rms.update_from_moments(*batch_moments(chunk))
    data = torch.cat(chunks).double()
    torch.testing.assert_close(rms.mean, data.mean(0))
    torch.testing.assert_close(rms.var, data.var(0, unbiased=False))
    assert float(rms.count) == 56


def test_normalize_clips_and_scale_does_not_centre() -> None:
    rms = RunningMeanStd(())
    rms.update_from_moments(*batch_moments(torch.tensor([0.0, 2.0, 4.0])))
    assert torch.allclose(rms.normalize(torch.tensor([2.0, 100.0]), clip=5.0), torch.tensor([0.0, 5.0]))
    std = (8.0 / 3.0) ** 0.5
    assert torch.allclose(rms.scale(torch.tensor([2.0]), clip=10.0), torch.tensor([2.0 / std]))
