"""The numpy reference backend: batched over a leading axis, looped over links in Python.

It is the reference every other backend is tested against; it favours clarity over speed and is
complex-step safe (its kernels accept complex inputs), which the derivative tests use."""

from __future__ import annotations

from ..backend import Backend
from . import aba as _aba
from . import aba_derivatives as _abad
from . import aba_second_derivatives as _abas
from . import crba as _crba
from . import kinematics as _kin
from . import minv as _minv
from . import rnea as _rnea
from . import rnea_derivatives as _rnead
from . import rnea_second_derivatives as _rneas


class NumpyBackend(Backend):
    name = "numpy"
    complex_step_safe = True

    def _rnea(self, model, q, v, a, fext):
        return _rnea.rnea(model, q, v, a, fext)

    def _crba(self, model, q):
        return _crba.crba(model, q)

    def _minv(self, model, q):
        return _minv.minv(model, q)

    def _aba(self, model, q, v, tau, fext):
        return _aba.aba(model, q, v, tau, fext)

    def _rnea_derivatives(self, model, q, v, a, fext):
        return _rnead.rnea_derivatives(model, q, v, a, fext)

    def _aba_derivatives(self, model, q, v, tau, fext, minv):
        return _abad.aba_derivatives(model, q, v, tau, fext, minv)

    def _aba_derivatives_with_acceleration(self, model, q, v, tau, fext, minv):
        return _abad.aba_derivatives(model, q, v, tau, fext, minv, return_acceleration=True)

    def _rnea_second_derivatives(self, model, q, v, a, fext):
        return _rneas.rnea_second_derivatives(model, q, v, a, fext)

    def _aba_second_derivatives(self, model, q, v, tau, fext):
        return _abas.aba_second_derivatives(model, q, v, tau, fext)

    def _aba_second_derivatives_bracket(self, model, q, v, tau, fext):
        return _abas.aba_second_derivatives_bracket(model, q, v, tau, fext)

    def _frame_placement(self, model, q, frame):
        return _kin.frame_placement(model, q, frame)

    def _body_placements(self, model, q):
        return _kin.body_placements(model, q)

    def _site_placements(self, model, q):
        return _kin.site_placements(model, q)

    def _frame_jacobian(self, model, q, frame, reference):
        return _kin.frame_jacobian(model, q, frame, reference)

    def _frame_jacobian_time_variation(self, model, q, v, frame, reference):
        return _kin.frame_jacobian_time_variation(model, q, v, frame, reference)

    def _center_of_mass(self, model, q):
        return _kin.center_of_mass(model, q)

    def _com_jacobian(self, model, q):
        return _kin.com_jacobian(model, q)
