"""Small modules that each plant one graph hazard in a tiny model: what detection must find."""

import torch


class CountingHead(torch.nn.Module):
    """lm_head plus a Python counter: eager sees it advance, a whole-step replay would freeze it."""

    def __init__(self, head: torch.nn.Linear):
        super().__init__()
        self.head = head
        self.calls = 0

    def forward(self, hidden):
        self.calls += 1
        return self.head(hidden) + self.calls


class HostReadingNorm(torch.nn.Module):
    """A norm that reads a device value on the host every step (a .item())."""

    def __init__(self, norm: torch.nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, hidden):
        scale = float(hidden.abs().max().item() >= 0)
        return self.norm(hidden) * scale


class ConstantScaledNorm(torch.nn.Module):
    """A norm that builds a tensor from Python data every step: a constant (transformers 5.17's eager
    mask does this), or a value that changes each step when `varying`."""

    def __init__(self, norm: torch.nn.Module, varying: bool = False):
        super().__init__()
        self.norm = norm
        self.varying = varying
        self.calls = 0

    def forward(self, hidden):
        self.calls += 1
        value = 1.0 + self.calls * 1e-3 if self.varying else 0.5
        return self.norm(hidden) * torch.tensor(value, dtype=hidden.dtype, device=hidden.device)


class HostConstantNorm(torch.nn.Module):
    """A norm that moves CPU-made constants to the device every step (gemma3n's epsilon, phimoe's rotary
    frequencies): a host-to-device copy on a GPU, invisible on the CPU."""

    def __init__(self, norm: torch.nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, hidden):
        epsilon = torch.tensor(1e-5).to(hidden.device)
        ramp = (torch.arange(hidden.shape[-1]) / hidden.shape[-1]).to(hidden.device, hidden.dtype)
        return self.norm(hidden) * (1 + ramp) + epsilon
