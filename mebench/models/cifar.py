"""ResNet-18, MobileNetV2 and VGG-11/16 for small (CIFAR-style) and 224x224 inputs (contract §5).

Built on torchvision's reference architectures with the usual CIFAR changes:
ResNet-18 gets a 3x3 stride-1 stem without max-pooling for inputs under 64
pixels (the ImageNet stem is kept for 224x224, e.g. Sewer-ML); MobileNetV2's
first convolution has stride 1 for small inputs; VGG uses the CIFAR variant
(batch-norm conv stack, global pooling, one linear layer). Input channels and
class count come from the dataset profile. See docs/architecture.md.
"""

from __future__ import annotations

from torch import nn

from mebench.models.registry import register_model

_VGG_CFG = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
}


@register_model("resnet18")
def resnet18(channels: int, num_classes: int, input_size: tuple[int, int]) -> nn.Module:
    from torchvision.models import resnet18 as tv_resnet18

    net = tv_resnet18(weights=None, num_classes=num_classes)
    if min(input_size) < 64:
        net.conv1 = nn.Conv2d(channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
    elif channels != 3:
        net.conv1 = nn.Conv2d(channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return net


@register_model("mobilenet_v2")
def mobilenet_v2(channels: int, num_classes: int, input_size: tuple[int, int]) -> nn.Module:
    from torchvision.models import mobilenet_v2 as tv_mobilenet_v2

    net = tv_mobilenet_v2(weights=None, num_classes=num_classes)
    stride = 1 if min(input_size) < 64 else 2
    net.features[0][0] = nn.Conv2d(channels, 32, kernel_size=3, stride=stride, padding=1, bias=False)
    return net


def _vgg(name: str, channels: int, num_classes: int, input_size: tuple[int, int]) -> nn.Module:
    layers: list[nn.Module] = []
    cin, side = channels, min(input_size)
    for v in _VGG_CFG[name]:
        if v == "M":
            if side >= 2:  # small inputs (28x28) stop pooling once the map is 1x1
                layers.append(nn.MaxPool2d(2))
                side //= 2
            continue
        layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.BatchNorm2d(int(v)), nn.ReLU(inplace=True)]
        cin = int(v)
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


@register_model("vgg11")
def vgg11(channels: int, num_classes: int, input_size: tuple[int, int]) -> nn.Module:
    return _vgg("vgg11", channels, num_classes, input_size)


@register_model("vgg16")
def vgg16(channels: int, num_classes: int, input_size: tuple[int, int]) -> nn.Module:
    return _vgg("vgg16", channels, num_classes, input_size)
