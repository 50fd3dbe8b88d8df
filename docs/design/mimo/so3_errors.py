import mujoco as mj

base = '''<mujoco><worldbody>
<body name="b"><joint name="ball" type="ball"/><geom size=".1"/><site name="s"/><body name="c" pos="0 0 .5"><joint name="h" type="hinge"/><geom size=".1"/></body></body>
<site name="r" pos="0 0 1"/></worldbody><actuator>%s</actuator>%s</mujoco>'''
cases = {
 'hinge joint': '<orientation joint="h"/>',
 'site no refsite': '<orientation site="s"/>',
 'jointinparent': '<orientation jointinparent="ball"/>',
 'forcerange lower!=0': '<orientation joint="ball" forcerange="-1 1"/>',
 'quat + integrator (general)': '<general joint="ball" gaintype="so3" biastype="so3" dyntype="integrator" input="quat" gainprm="1" biasprm="0 -1 0"/>',
 'gain so3 bias affine': '<general joint="ball" gaintype="so3" biastype="affine"/>',
 'kp mismatch': '<general joint="ball" gaintype="so3" biastype="so3" gainprm="2" biasprm="0 -1 0"/>',
 'filter dyn': '<general joint="ball" gaintype="so3" biastype="so3" dyntype="filter" gainprm="1" biasprm="0 -1 0"/>',
 'int actdim 2': '<general joint="ball" gaintype="so3" biastype="so3" dyntype="integrator" actdim="2" gainprm="1" biasprm="0 -1 0"/>',
 'damping on so3 joint': '<general joint="ball" gaintype="so3" biastype="so3" gainprm="1" biasprm="0 -1 0" damping="1"/>',
 'armature on so3 joint': '<general joint="ball" gaintype="so3" biastype="so3" gainprm="1" biasprm="0 -1 0" armature="1"/>',
 'kv and dampratio': '<orientation joint="ball" kv="1" dampratio="1"/>',
 'kv negative': '<orientation joint="ball" kv="-1"/>',
 'input bad': '<orientation joint="ball" input="pos"/>',
 'input on motor': '<motor joint="h" input="quat"/>',
 'orientation gear': '<orientation joint="ball" gear="2 0 0 0 0 0"/>',
 'general so3 gear': '<general joint="ball" gaintype="so3" biastype="so3" gainprm="1" biasprm="0 -1 0" gear="2 0 0 0 0 0"/>',
 'general so3 jointinparent': '<general jointinparent="ball" gaintype="so3" biastype="so3" gainprm="1" biasprm="0 -1 0"/>',
 'so3 tendon': '<general tendon="t" gaintype="so3" biastype="so3" gainprm="1" biasprm="0 -1 0"/>',
 'quat ctrlrange': '<orientation joint="ball" input="quat" ctrlrange="-1 1"/>',
 'orientation actlimited int': '<general joint="ball" gaintype="so3" biastype="so3" dyntype="integrator" gainprm="1" biasprm="0 -1 0" actrange="-1 1"/>',
 'ok nsample': '<orientation joint="ball" nsample="3" delay="0.004"/>',
}
for k, a in cases.items():
    try:
        m = mj.MjModel.from_xml_string(base % (a, ''))
        extra = f"ok: nu={m.nu} nout={m.nout} na={m.na} trntype={m.actuator_trntype} gear0={m.actuator_gear[0]} dof_armature={m.dof_armature[:3]} dof_damping={m.dof_damping[:3]} jnt_actid={m.jnt_actuatorid} actlimited={m.actuator_actlimited} nhistory={m.nhistory} histadr={m.actuator_historyadr}"
        print(f'{k:28s} -> {extra}')
    except Exception as e:
        print(f'{k:28s} -> ERROR {str(e).splitlines()[0]}')
# sensors
m = mj.MjModel.from_xml_string(base % ('<orientation name="o" joint="ball"/>', '<sensor><actuatorpos actuator="o"/><actuatorvel actuator="o"/><actuatorfrc actuator="o"/><jointactuatorfrc joint="h"/></sensor>'))
print('sensor dims', m.sensor_dim, 'adr', m.sensor_adr)
