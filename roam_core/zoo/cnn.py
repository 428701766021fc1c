"""Convolutional zoo models in plain torch, following torchvision's architectures.

AlexNet, VGG-11, ResNet-50 (v1.5), MNASNet 0.5, MobileNetV2 and EfficientNet-B0 with
torchvision's layer structure (so parameter counts match the published ones exactly), plus
``ResidualBlockNet``, a tiny BatchNorm CNN for teaching.  Inputs are ``[B, 3, H, W]`` images;
outputs are ``[B, num_classes]`` logits.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from torch import nn

__all__ = [
    "VGG11",
    "AlexNet",
    "EfficientNetB0",
    "MNASNet",
    "MobileNetV2",
    "ResNet50",
    "ResidualBlockNet",
    "make_divisible",
]

_logger = logging.getLogger(__name__)


def make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round channels to a multiple of ``divisor`` without going below 90% (torchvision rule).

    Examples
    --------
    >>> make_divisible(32 * 0.75), make_divisible(12), make_divisible(6 * 16)
    (24, 16, 96)
    """
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class AlexNet(nn.Module):
    """torchvision ``alexnet`` (61,100,840 parameters)."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        r = lambda: nn.ReLU(inplace=True)  # noqa: E731
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, stride=4, padding=2), r(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), r(), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), r(),
            nn.Conv2d(384, 256, 3, padding=1), r(),
            nn.Conv2d(256, 256, 3, padding=1), r(), nn.MaxPool2d(3, 2))
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(256 * 36, 4096), r(),
            nn.Dropout(dropout), nn.Linear(4096, 4096), r(), nn.Linear(4096, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class VGG11(nn.Module):
    """torchvision ``vgg11`` without batch norm (132,863,336 parameters)."""

    CFG = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = 3
        for v in self.CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, int(v), 3, padding=1), nn.ReLU(inplace=True)]
                c = int(v)
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 49, 4096), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(4096, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
             act: type[nn.Module] | None = nn.ReLU, eps: float = 1e-5) -> list[nn.Module]:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout, eps=eps)]
    if act is not None:
        layers.append(act(inplace=True))
    return layers


class _Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                         nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        idt = x if self.downsample is None else self.downsample(x)
        return self.relu(out + idt)


class ResNet50(nn.Module):
    """torchvision ``resnet50`` (v1.5: stride in the 3x3 conv; 25,557,032 parameters)."""

    def __init__(self, num_classes: int = 1000, layers: Sequence[int] = (3, 4, 6, 3)) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = 64
        stages = []
        for i, n in enumerate(layers):
            width = 64 * 2 ** i
            blocks = []
            for j in range(n):
                blocks.append(_Bottleneck(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * 4
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class _InvertedResidual(nn.Module):
    """MobileNetV2 / MNASNet block: expand 1x1, depthwise kxk, project 1x1."""

    def __init__(self, cin: int, cout: int, k: int, stride: int, expand: float,
                 act: type[nn.Module] = nn.ReLU6) -> None:
        super().__init__()
        hidden = round(cin * expand)
        layers: list[nn.Module] = []
        if expand != 1:
            layers += _conv_bn(cin, hidden, 1, act=act)
        layers += _conv_bn(hidden, hidden, k, stride, groups=hidden, act=act)
        layers += _conv_bn(hidden, cout, 1, act=None)
        self.conv = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision ``mobilenet_v2`` (width 1.0; 3,504,872 parameters)."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Sequential(*_conv_bn(3, 32, 3, 2, act=nn.ReLU6))]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(_InvertedResidual(cin, c, 3, s if i == 0 else 1, t))
                cin = c
        layers.append(nn.Sequential(*_conv_bn(cin, 1280, 1, act=nn.ReLU6)))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class MNASNet(nn.Module):
    """torchvision ``mnasnet0_5`` (alpha 0.5; 2,218,512 parameters)."""

    def __init__(self, alpha: float = 0.5, num_classes: int = 1000,
                 dropout: float = 0.2) -> None:
        super().__init__()
        d = [_round_to_multiple(c * alpha) for c in (32, 16, 24, 40, 80, 96, 192, 320)]
        relu = nn.ReLU
        layers: list[nn.Module] = [
            *_conv_bn(3, d[0], 3, 2, act=relu),
            *_conv_bn(d[0], d[0], 3, 1, groups=d[0], act=relu),
            *_conv_bn(d[0], d[1], 1, act=None)]
        for (k, s, e, r), cin, cout in zip(
                ((3, 2, 3, 3), (5, 2, 3, 3), (5, 2, 6, 3), (3, 1, 6, 2), (5, 2, 6, 4),
                 (3, 1, 6, 1)), d[1:7], d[2:8], strict=True):
            blocks = [_InvertedResidual(cin, cout, k, s, e, act=relu)]
            blocks += [_InvertedResidual(cout, cout, k, 1, e, act=relu) for _ in range(r - 1)]
            layers.append(nn.Sequential(*blocks))
        layers += _conv_bn(d[7], 1280, 1, act=relu)
        self.layers = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(dropout, inplace=True),
                                        nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.layers(x).mean([2, 3]))


def _round_to_multiple(val: float, divisor: int = 8, round_up_bias: float = 0.9) -> int:
    new_val = max(divisor, int(val + divisor / 2) // divisor * divisor)
    return new_val if new_val >= round_up_bias * val else new_val + divisor


class _StochasticDepth(nn.Module):
    """Row-wise stochastic depth (drops whole samples of a residual branch)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        noise = torch.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype, device=x.device)
        noise = noise.bernoulli_(keep).div_(keep)
        return x * noise


class _MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int,
                 sd_prob: float) -> None:
        super().__init__()
        hidden = make_divisible(cin * expand)
        layers: list[nn.Module] = []
        if hidden != cin:
            layers += _conv_bn(cin, hidden, 1, act=nn.SiLU)
        layers += _conv_bn(hidden, hidden, k, stride, groups=hidden, act=nn.SiLU)
        squeeze = max(1, cin // 4)
        self.pre = nn.Sequential(*layers)
        self.se_fc1 = nn.Conv2d(hidden, squeeze, 1)
        self.se_fc2 = nn.Conv2d(squeeze, hidden, 1)
        self.act = nn.SiLU(inplace=True)
        self.project = nn.Sequential(*_conv_bn(hidden, cout, 1, act=None))
        self.use_res = stride == 1 and cin == cout
        self.stochastic_depth = _StochasticDepth(sd_prob)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pre(x)
        s = nn.functional.adaptive_avg_pool2d(h, 1)
        s = torch.sigmoid(self.se_fc2(self.act(self.se_fc1(s))))
        out = self.project(h * s)
        return self.stochastic_depth(out) + x if self.use_res else out


class EfficientNetB0(nn.Module):
    """torchvision ``efficientnet_b0`` (5,288,548 parameters), with stochastic depth 0.2."""

    CFG = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
           (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
           (6, 3, 1, 192, 320, 1))

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2,
                 stochastic_depth: float = 0.2) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Sequential(*_conv_bn(3, 32, 3, 2, act=nn.SiLU))]
        total = sum(c[-1] for c in self.CFG)
        idx = 0
        for e, k, s, cin, cout, n in self.CFG:
            stage = []
            for i in range(n):
                stage.append(_MBConv(cin if i == 0 else cout, cout, k, s if i == 0 else 1, e,
                                     stochastic_depth * idx / total))
                idx += 1
            layers.append(nn.Sequential(*stage))
        layers.append(nn.Sequential(*_conv_bn(320, 1280, 1, act=nn.SiLU)))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(dropout, inplace=True),
                                        nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class ResidualBlockNet(nn.Module):
    """Teaching model: stem conv-BN-ReLU, one residual basic block, pooling, linear head."""

    def __init__(self, channels: int = 16, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, channels, 3))
        self.conv1 = nn.Sequential(*_conv_bn(channels, channels, 3))
        self.conv2 = nn.Sequential(*_conv_bn(channels, channels, 3, act=None))
        self.relu = nn.ReLU()
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.relu(x + self.conv2(self.conv1(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
