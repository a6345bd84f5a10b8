import torch

from pagoda.sample import Sampler, compute_logprobs, compute_prompt_logprobs


def test_ranks_count_strictly_larger_logprobs_with_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0]] * 4)
    out = compute_logprobs(logits, torch.tensor([1, 2, 0, 3]), k=0)
    assert out.ranks.tolist() == [1, 1, 3, 4]
    assert out.token_ids.tolist() == [[1], [2], [0], [3]]


def test_sampler_logprobs_come_from_raw_logits(state):
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    states = [
        state(temperature=0.0, logprobs=3, output=[5, 5], repetition_penalty=1.8,
              logit_bias={9: 40.0}),
        state(temperature=0.5, top_k=4, logprobs=0, seed=1),
        state(temperature=0.0),
        state(temperature=2.0, presence_penalty=1.0, output=[1], logprobs=1),
    ]
    out = Sampler(seed=0)(logits, states)
    assert out.sampled_token_ids[0] == 9  # the bias decided the token ...
    raw = torch.log_softmax(logits, dim=-1)  # ... but logprobs ignore all processing
    lp = out.logprobs
    sampled = out.sampled_token_ids
    assert lp.token_ids.shape == lp.logprobs.shape == (4, 4)
    assert torch.equal(lp.token_ids[:, 0], sampled)
    torch.testing.assert_close(lp.logprobs[:, 0], raw.gather(1, sampled[:, None])[:, 0])
    top = raw.topk(3, dim=-1)
    assert torch.equal(lp.token_ids[:, 1:], top.indices)
    torch.testing.assert_close(lp.logprobs[:, 1:], top.values)
    expected_ranks = (raw > raw.gather(1, sampled[:, None])).sum(dim=-1) + 1
    assert torch.equal(lp.ranks, expected_ranks)
    assert lp.ranks[0] > 1  # token 9 was not the model's favourite


def test_tolists_trims_each_row_to_its_k(state):
    logits = torch.randn(2, 16, generator=torch.Generator().manual_seed(1))
    out = Sampler()(logits, [state(temperature=0.0, logprobs=2), state(temperature=0.0)])
    lists = out.logprobs.tolists(num_top=[2, 0])
    assert [len(row) for row in lists.token_ids] == [3, 1]
    assert [len(row) for row in lists.logprobs] == [3, 1]
    assert lists.token_ids[1] == [int(logits[1].argmax())]
    assert lists.ranks == [1, 1]
    assert [len(row) for row in out.logprobs.tolists().token_ids] == [3, 3]


def test_prompt_logprobs():
    logits = torch.randn(5, 32, generator=torch.Generator().manual_seed(2))
    logits[3] = 0.0  # all tied: every token has rank 1
    targets = torch.tensor([4, 0, 31, 7, 12])
    out = compute_prompt_logprobs(logits, targets, k=2)
    raw = torch.log_softmax(logits, dim=-1)
    assert torch.equal(out.token_ids[:, 0], targets)
    torch.testing.assert_close(out.logprobs[:, 0], raw[torch.arange(5), targets])
    torch.testing.assert_close(out.logprobs[:, 1:], raw.topk(2, dim=-1).values)
    ranks = (raw > raw[torch.arange(5), targets][:, None]).sum(dim=-1) + 1
    assert torch.equal(out.ranks, ranks) and out.ranks[3] == 1
